#!/bin/sh
# SPDX-License-Identifier: MIT
#
# localize-archive.sh IN OUT CC... - makes libkairos.a from the internal
# archive IN: its objects are linked into one relocatable object whose
# hidden symbols (everything but the public API, which kairos.h marks with
# default visibility) become local, so that a program linked statically
# against kairos cannot clash with, or call into, kairos's internal names.
# CC is the compiler command, used as the linker for `-r`.
set -eu
in=$1
out=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case $in in /*) ;; *) in=$PWD/$in ;; esac
if [ "$(head -c 7 "$in")" = '!<thin>' ]; then
	# A thin archive (meson's own) names its members by path, relative to it.
	dir=$(dirname "$in")
	ar t "$in" | while IFS= read -r m; do
		case $m in /*) printf '%s\n' "$m" ;; *) printf '%s\n' "$dir/$m" ;; esac
	done >"$tmp/members"
	# shellcheck disable=SC2046 # one object path per line, no blanks in them
	"$@" -r -nostdlib -o "$tmp/kairos.o" $(cat "$tmp/members")
else
	(cd "$tmp" && ar x "$in")
	"$@" -r -nostdlib -o "$tmp/kairos.o" "$tmp"/*.o
fi
objcopy --localize-hidden "$tmp/kairos.o"
rm -f "$out"
ar rcs "$out" "$tmp/kairos.o"
