#!/bin/sh
# SPDX-License-Identifier: MIT
#
# install-test.sh - installs the build into a temporary DESTDIR and builds a
# program from outside the tree against it through pkg-config, as a user
# would: once dynamically (run with the installed library) and once with
# -static and `pkg-config --static` (the .pc file must name every library
# that libkairos.a needs, in an order a static link accepts).
#
#   install-test.sh SRCDIR BUILDDIR DEFAULT_LIBRARY B_SANITIZE
#
# Exits 0 when both links work and the programs run; 1 on a failure; 77
# (skip) when something needed is missing: meson, pkg-config or cc; a
# sanitizer build (its library needs the sanitizer runtime); for the -static
# link, a libkairos.a (-Ddefault_library=shared) or the static libc,
# liburing and liburcu archives.  A skipped -static link after a dynamic
# link that worked still exits 77, so that the log says what was not tried.

set -u

src=${1:?usage: install-test.sh SRCDIR BUILDDIR DEFAULT_LIBRARY B_SANITIZE}
build=${2:?}
kind=${3:?}
sanitize=${4:-none}
cc=${CC:-cc}

skip() {
	echo "install-test: SKIP: $*"
	exit 77
}
fail() {
	echo "install-test: FAIL: $*"
	exit 1
}

[ "$sanitize" = none ] || skip "a sanitizer build ($sanitize) is not installed as is"
for tool in meson pkg-config "$cc"; do
	command -v "$tool" >/dev/null 2>&1 || skip "no $tool"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kairos-install.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT INT TERM
dest=$tmp/dest

meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; fail "meson install"; }

pc=$(find "$dest" -name kairos.pc | head -n 1)
[ -n "$pc" ] || fail "no kairos.pc installed"
# The .pc file's prefix is the configured one; the files are under DESTDIR.
prefix=$(pkg-config --variable=prefix "$pc")
PKG_CONFIG_PATH=$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export PKG_CONFIG_PATH
pc() { pkg-config --define-variable=prefix="$dest$prefix" "$@" kairos; }
libdir=$(pc --variable=libdir)
[ -f "$dest$prefix/include/kairos/kairos.h" ] || fail "kairos.h not installed"
grep -q '^URL: .' "$pc" || fail "kairos.pc has no URL"

# Dynamic: the shared library if there is one, else the archive (whose
# private dependencies --static adds).
if [ -e "$libdir/libkairos.so" ]; then
	flags=$(pc --cflags --libs) || fail "pkg-config --cflags --libs"
else
	flags=$(pc --static --cflags --libs) || fail "pkg-config --static --cflags --libs"
fi
echo "install-test: $cc install-prog.c $flags"
# shellcheck disable=SC2086
"$cc" -o "$tmp/prog" "$src/tests/install-prog.c" $flags || fail "dynamic link"
LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$tmp/prog" || fail "dynamic program"
if [ -e "$libdir/libkairos.so" ]; then
	LD_LIBRARY_PATH=$libdir ldd "$tmp/prog" | grep -q "$libdir/libkairos.so" ||
		fail "the program does not use the installed libkairos.so"
fi

# Static: every archive the .pc file names, and the C library's.
[ -e "$libdir/libkairos.a" ] || skip "no libkairos.a (default_library=$kind)"
# The archive defines the public API and nothing else a program could clash with.
if command -v nm >/dev/null 2>&1; then
	extra=$(nm -g --defined-only "$libdir/libkairos.a" |
		awk 'NF == 3 && $3 !~ /^kairos_/ { print $3 }' | head -n 5 | tr '\n' ' ')
	[ -z "$extra" ] || fail "libkairos.a defines internal names: $extra"
fi
flags=$(pc --static --cflags --libs) || fail "pkg-config --static --cflags --libs"
for l in $(echo "$flags" | tr ' ' '\n' | sed -n 's/^-l//p') c; do
	[ "$l" = kairos ] && continue
	"$cc" -print-file-name="lib$l.a" | grep -q / || skip "no lib$l.a"
done
echo "install-test: $cc -static install-prog.c $flags"
# shellcheck disable=SC2086
"$cc" -static -o "$tmp/prog-static" "$src/tests/install-prog.c" $flags ||
	fail "static link"
"$tmp/prog-static" || fail "static program"
if command -v file >/dev/null 2>&1; then
	file "$tmp/prog-static" | grep -q 'statically linked' || fail "not statically linked"
fi
echo "install-test: dynamic and static links work"
exit 0
