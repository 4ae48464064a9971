#!/bin/sh
# SPDX-License-Identifier: MIT
#
# check-man.sh - lints the manual pages and checks that every public function
# has one.
#
#   check-man.sh MANDIR HEADER
#
# (a) Each page is formatted with groff (or linted with mandoc when groff is
#     missing); any warning fails the test.
# (b) Each function declared in HEADER (a line that starts with its return
#     type, whatever it is: "int kairos_x(", "const char *kairos_y(") must
#     have MANDIR/<function>.3: a page, a symbolic link
#     to one, or a ".so" page naming one; and the NAME section of the page it
#     resolves to must list the function.
#
# Exits 0 when all is well, 1 on a failure, 77 (skip) when neither groff nor
# mandoc is installed.

set -u

mandir=${1:?usage: check-man.sh MANDIR HEADER}
header=${2:?usage: check-man.sh MANDIR HEADER}
fail=0

if command -v groff >/dev/null 2>&1; then
	lint() { groff -man -Tutf8 -ww -z "$1" 2>&1; }
	linter=groff
elif command -v mandoc >/dev/null 2>&1; then
	# -W warning: report warnings and worse; style messages are not failures.
	lint() { mandoc -Tlint -W warning "$1" 2>&1; }
	linter=mandoc
else
	echo "check-man: neither groff nor mandoc is installed; skipping"
	exit 77
fi

# The page that MANDIR/$1 resolves to: itself, a symbolic link's target, or
# the target of a one-line ".so man3/x.3" page.  Empty if it does not resolve.
resolve() {
	p=$mandir/$1
	if [ -L "$p" ]; then
		t=$(readlink "$p")
		case $t in
		/*) p=$t ;;
		*) p=$mandir/$t ;;
		esac
	fi
	[ -f "$p" ] || return 0
	so=$(sed -n 's/^\.so[ 	]\{1,\}//p' "$p" | head -n 1)
	if [ -n "$so" ]; then
		p=$mandir/${so##*/}
		[ -f "$p" ] || return 0
	fi
	echo "$p"
}

# (a) Lint every real page once; links and .so pages are covered by their target.
n=0
for page in "$mandir"/*.3; do
	[ -L "$page" ] && continue
	grep -q '^\.so[ 	]' "$page" && continue
	n=$((n + 1))
	out=$(lint "$page")
	if [ -n "$out" ]; then
		echo "check-man: $linter reports on $page:"
		echo "$out"
		fail=1
	fi
done
if [ "$n" -eq 0 ]; then
	echo "check-man: no pages in $mandir"
	exit 1
fi

# (b) Every public function has a page that names it.
fns=$(sed -n -E 's/^[a-z][a-z0-9_ ]*[ *](kairos_[A-Za-z0-9_]*)\(.*/\1/p' "$header")
if [ -z "$fns" ]; then
	echo "check-man: no functions found in $header"
	exit 1
fi
for fn in $fns; do
	target=$(resolve "$fn.3")
	if [ -z "$target" ]; then
		echo "check-man: $fn has no page ($mandir/$fn.3)"
		fail=1
		continue
	fi
	# The NAME section runs from ".SH NAME" to the next ".SH".
	if ! sed -n '/^\.SH NAME/,/^\.SH /p' "$target" | grep -qw "$fn"; then
		echo "check-man: $target does not list $fn in its NAME section"
		fail=1
	fi
done

[ "$fail" -eq 0 ] && echo "check-man: $n pages clean ($linter), $(echo "$fns" | wc -l) functions documented"
exit "$fail"
