#!/bin/sh
# SPDX-License-Identifier: MIT
#
# idle-test.sh - runs kairos-idle-server and kairos-idle-load against each
# other on 127.0.0.1 for a few seconds and checks the verdict.
#
#	idle-test.sh SERVER LOAD [extra kairos-idle-load options]
#
# Small numbers: 300 connections, 60 of them idle, half of those closing
# themselves within a millisecond or two of T so that the server's
# kairos_cancel() races the timer firing; T = 300 ms, 4 s.  IDLE_TEST_CONNS,
# IDLE_TEST_T_MS, IDLE_TEST_DURATION and IDLE_TEST_SLACK_MS change them.  It
# checks behaviour, not capacity.
#
# Passes when the client's verdict is PASS (exit 0: every idle connection
# closed, no busy one, none early, none later than T + slack) and the server
# exits 0 after QUIT (its kairos counters add up, nothing fired early, no
# cancel or reset of a live connection's timer failed).  An INCONCLUSIVE
# verdict (exit 3: the client could not do its part, such as open its
# connections or keep the busy ones busy, or the machine stalled it for over
# half the slack while closes came late; never with a close early) is run
# again, up to three runs in all; three inconclusive runs make the test skip
# (exit 77), not pass.
#
# IDLE_TEST_SERVER_LATE_MS=N runs the server with a T N ms longer than the
# client's, and then the test passes only if the client's verdict is FAIL
# with late closes and no early or busy ones: the client's lateness check
# can fail.  An INCONCLUSIVE verdict is run again there too.  The server
# is killed on every exit path, so a failure leaves nothing behind.
set -u

server=${1:?usage: idle-test.sh SERVER LOAD [options]}
load=${2:?usage: idle-test.sh SERVER LOAD [options]}
shift 2

idle_ms=${IDLE_TEST_T_MS:-300}
conns=${IDLE_TEST_CONNS:-300}
duration=${IDLE_TEST_DURATION:-4}
# The client's default slack (1 tick + 50 ms) is for a machine of its own;
# this test runs beside other builds and benchmarks on two cores, where a
# close was seen 41 ms late while kairos itself fired within 4 ms (the rest
# was both programs waiting for a CPU).  100 ms keeps the check meaningful
# (a close seen past T + 100 ms still fails) without flaking.
slack_ms=${IDLE_TEST_SLACK_MS:-100}
server_late_ms=${IDLE_TEST_SERVER_LATE_MS:-0}

dir=$(mktemp -d "${TMPDIR:-/tmp}/kairos-idle-test.XXXXXX") || exit 1
spid=
lpid=
# shellcheck disable=SC2317  # reached through the trap
cleanup() {
	for pid in $lpid $spid; do
		if kill -0 "$pid" 2>/dev/null; then
			kill "$pid" 2>/dev/null
			sleep 0.2
			kill -9 "$pid" 2>/dev/null
		fi
	done
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

shown=
fail() {
	echo "idle-test: FAIL: $*"
	if [ -z "$shown" ]; then
		echo "--- server output"
		cat "$dir/server.out" "$dir/server.err" 2>/dev/null
	fi
	exit 1
}

# One server and one client run; returns the client's exit status (0, 1, 3)
# after checking the server's, or fails the test outright.
run_once() {
	# --duration is a safety net: the client's QUIT normally ends it.
	shown=
	"$server" --idle=$((idle_ms + server_late_ms)) --duration=$((duration + 30)) \
		>"$dir/server.out" 2>"$dir/server.err" &
	spid=$!

	port=
	i=0
	while [ $i -lt 100 ]; do
		port=$(sed -n '1s/^port \([0-9][0-9]*\)$/\1/p' "$dir/server.out" 2>/dev/null)
		[ -n "$port" ] && break
		kill -0 "$spid" 2>/dev/null || fail "server exited before printing its port"
		sleep 0.05
		i=$((i + 1))
	done
	[ -n "$port" ] || fail "server printed no port within 5 s"
	echo "idle-test: server pid $spid on port $port" \
		"(KAIROS_BACKEND=${KAIROS_BACKEND:-auto})"

	# In the background, so that a signal to this script is handled now.
	"$load" --port "$port" --conns "$conns" --idle="$idle_ms" --interval=50 \
		--idle-frac=0.2 --race-frac 0.5 \
		--duration "$duration" --slack "$slack_ms" --quit-server "$@" \
		>"$dir/load.out" 2>&1 &
	lpid=$!
	wait "$lpid"
	lrc=$?
	lpid=
	cat "$dir/load.out"
	case $lrc in
	0|1|3)	;;
	*)	fail "load client exited $lrc" ;;
	esac

	# Wait for the server to exit on QUIT (up to 10 s), then take its status.
	i=0
	while kill -0 "$spid" 2>/dev/null && [ $i -lt 100 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -0 "$spid" 2>/dev/null && fail "server still running 10 s after QUIT"
	wait "$spid"
	src=$?
	spid=
	echo "--- server output"
	cat "$dir/server.out" "$dir/server.err"
	shown=1

	[ "$src" -eq 0 ] || fail "server exited $src"
	grep -q '^server: ok$' "$dir/server.out" || fail "server report not ok"
	if [ "$server_late_ms" -gt 0 ]; then
		# A stalled machine excuses lateness: that run says nothing, either way.
		if [ "$lrc" -eq 3 ]; then
			grep -q '^verdict: INCONCLUSIVE' "$dir/load.out" ||
				fail "exit 3 without an INCONCLUSIVE verdict"
			return 3
		fi
		[ "$lrc" -eq 1 ] || fail "a server $server_late_ms ms late, and the client exited $lrc"
		grep -q '^idle closed by server: .*(early 0, late [1-9]' "$dir/load.out" ||
			fail "a server $server_late_ms ms late, and no late close"
		grep -q '^busy closed by server: 0$' "$dir/load.out" || fail "busy connections closed"
		return 0
	fi
	case $lrc in
	0)	grep -q '^verdict: PASS$' "$dir/load.out" || fail "no PASS verdict" ;;
	3)	grep -q '^verdict: INCONCLUSIVE' "$dir/load.out" ||
			fail "exit 3 without an INCONCLUSIVE verdict" ;;
	*)	fail "load client exited $lrc (verdict FAIL)" ;;
	esac
	return "$lrc"
}

attempt=1
while :; do
	run_once "$@" && break
	if [ $attempt -ge 3 ]; then
		echo "idle-test: SKIP: three inconclusive runs (the machine kept stalling)"
		exit 77
	fi
	attempt=$((attempt + 1))
	echo "idle-test: inconclusive run, again (run $attempt of 3)"
done
echo "idle-test: PASS"
exit 0
