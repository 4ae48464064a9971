#!/bin/sh
# SPDX-License-Identifier: MIT
# man-lint.sh PAGE... - each page through groff with every warning as an error.
# Exit 77 (skip) without groff.
command -v groff >/dev/null 2>&1 || { echo "man-lint: no groff: skipped"; exit 77; }
rc=0
for page in "$@"; do
	out=$(groff -man -Tutf8 -ww -z "$page" 2>&1)
	if [ -n "$out" ]; then
		printf '%s:\n%s\n' "$page" "$out"
		rc=1
	fi
done
exit $rc
