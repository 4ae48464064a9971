#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# cli-test.sh - the command line of the tools, one check per call:
#
#   cli-test.sh bad-value STRESS BENCH SERVER LOAD   a bad value: one line naming
#                                     the option and its range, exit status 2
#   cli-test.sh json-first STRESS     --json to a path that cannot be written
#                                     fails at once, before the run
#   cli-test.sh sigint STRESS         SIGINT during a run: the report of what
#                                     ran, "interrupted", exit status 130
#   cli-test.sh opt-equals SERVER LOAD  --opt=value works as --opt value
#   cli-test.sh scale BENCH           a short scale run: a row per thread count,
#                                     the shard threads' CPU read and in range
set -u

fail() {
	echo "cli-test: FAIL: $*" >&2
	exit 1
}

# expect_bad WANT CMD...: exit status 2 and exactly one stderr line matching WANT.
expect_bad() {
	local want=$1 err rc
	shift
	err=$("$@" 2>&1 >/dev/null)
	rc=$?
	echo "$* -> $rc: $err"
	[ "$rc" -eq 2 ] || fail "$*: exit status $rc, not 2"
	[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "$*: not one line: $err"
	printf '%s\n' "$err" | grep -qE -- "$want" || fail "$*: '$err' does not match '$want'"
}

case "${1:-}" in
bad-value)
	stress=$2 bench=$3 server=$4 load=$5
	expect_bad '^kairos-stress: --threads: 0 is out of range \(1\.\.[0-9]+\)$' \
		"$stress" --threads 0
	expect_bad '^kairos-stress: --queue-share: 101 is out of range \(0\.\.100\)$' \
		"$stress" --queue-share=101
	expect_bad '^kairos-stress: --duration: .* \(1ms\.\.' "$stress" -d 0
	expect_bad "^kairos-stress: unknown option '--bogus'" "$stress" --bogus
	expect_bad '^kairos-bench service: --runs: 0 is out of range \(1\.\.1000\)$' \
		"$bench" service --runs 0
	expect_bad '^kairos-bench peer: --n: 5 is out of range \(' "$bench" peer --n=5
	expect_bad '^kairos-bench peer: --cycles: 0 is out of range \(1\.\.100\)$' \
		"$bench" peer --cycles 0
	expect_bad '^kairos-bench wheel: --seed: ' "$bench" wheel --seed -1
	expect_bad "^kairos-bench: unknown mode 'nope'" "$bench" nope
	expect_bad '^kairos-idle-server: --idle: 0 is out of range \(1\.\.3600000\)$' \
		"$server" --idle=0
	expect_bad '^kairos-idle-load: --port: 70000 is out of range \(1\.\.65535\)$' \
		"$load" --port 70000
	expect_bad '^kairos-idle-load: --idle-frac: 2 is out of range \(0\.\.1\)$' \
		"$load" --port 1 --idle-frac=2 ;;
json-first)
	t0=$(date +%s%N)
	expect_bad '^kairos-stress: --json: cannot write /nonexistent/' \
		"$2" --duration 30 --quiet --json /nonexistent/dir/report.json
	expect_bad '^kairos-stress: --plot: cannot write /nonexistent/' \
		"$2" --duration 30 --quiet --plot /nonexistent/dir/plot.svg
	ms=$((($(date +%s%N) - t0) / 1000000))
	[ "$ms" -lt 5000 ] || fail "the bad paths took $ms ms: not refused before the run" ;;
sigint)
	out=$(mktemp)
	trap 'rm -f "$out"' EXIT
	"$2" --duration 60 --threads 2 --timers 2000 --quiet >"$out" 2>&1 &
	pid=$!
	sleep 1.5
	kill -INT "$pid"
	wait "$pid"
	rc=$?
	cat "$out"
	[ "$rc" -eq 130 ] || fail "exit status $rc after SIGINT, not 130"
	grep -q 'of load (interrupted' "$out" || fail "no report of the interrupted run"
	grep -q 'interrupted by signal 2' "$out" || fail "does not say it was interrupted" ;;
opt-equals)
	server=$2 load=$3
	"$server" --help >/dev/null || fail "kairos-idle-server --help"
	"$load" --help >/dev/null || fail "kairos-idle-load --help"
	out=$("$server" --port=0 --idle=50 --duration=1 2>&1) || fail "server: $out"
	echo "$out" | grep -q '^server: ok$' || fail "kairos-idle-server --opt=value: $out"
	expect_bad '^kairos-idle-load: --interval: 60 is over half of --idle \(100\)$' \
		"$load" --port=1 --idle=100 --interval=60 ;;
scale)
	bench=$2
	# The shard CPU column reads per-task schedstat, which some kernels lack.
	if [ ! -r "/proc/$$/task/$$/schedstat" ]; then
		echo "cli-test: scale: no /proc/PID/task/TID/schedstat here: skipped"
		exit 77
	fi
	out=$("$bench" scale --threads 1,2 --per-thread 1000 --seconds 0.2 --runs 1 2>/dev/null) ||
		fail "kairos-bench scale: exit status $?: $out"
	echo "$out" | grep -v '^#'
	for t in 1 2; do
		row=$(echo "$out" | grep -E "^$t +[0-9]") || fail "no row for T=$t"
		# The busiest shard's CPU and the mean, "max%/ mean%", then the floor's two fields.
		cpu=$(echo "$row" | sed -E 's/.* ([0-9]+)%\/ *([0-9]+)% .*/\1 \2/')
		read -r max mean <<<"$cpu"
		[[ "$max" =~ ^[0-9]+$ && "$mean" =~ ^[0-9]+$ ]] || fail "T=$t: no shard CPU in '$row'"
		# Calls post to a shard, so some shard thread worked; none beyond the wall.
		[ "$max" -ge 1 ] && [ "$max" -le 105 ] && [ "$mean" -le "$max" ] ||
			fail "T=$t: shard CPU $max%/$mean% out of range"
		# The floor: a rate, and its ratio to its own T=1 (1.00x there).
		echo "$row" | grep -Eq ' [0-9]+\.[0-9]{3} +[0-9]+\.[0-9]{2}x$' ||
			fail "T=$t: no floor in '$row'"
		[ "$t" != 1 ] || echo "$row" | grep -Eq ' 1\.00x$' || fail "T=1: floor not 1.00x: '$row'"
	done ;;
*)
	sed -n '4,14p' "$0" >&2
	exit 2 ;;
esac
echo "cli-test: $1: ok"
