#!/usr/bin/env bash
# start-dockerd.sh starts a Docker engine in the background unless one already
# answers `docker info`, then waits (up to DOCKERD_WAIT_SECONDS, default 60)
# until it does. It is safe to rerun. The daemon's log goes to DOCKERD_LOG
# (default /tmp/dockerd.log) and its PID to DOCKERD_PIDFILE
# (default /tmp/dockerd.pid).
#
# Progress goes to stderr. Stdout carries only the PID of the dockerd this call
# started, and is empty when an engine was already running, so a caller can
# stop exactly what it started:  pid=$(scripts/start-dockerd.sh)
set -euo pipefail

log="${DOCKERD_LOG:-/tmp/dockerd.log}"
pidfile="${DOCKERD_PIDFILE:-/tmp/dockerd.pid}"
wait_seconds="${DOCKERD_WAIT_SECONDS:-60}"

if docker info >/dev/null 2>&1; then
	echo "start-dockerd: docker engine already answers; nothing to do" >&2
	exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
	echo "start-dockerd: dockerd not found; install it with: apt-get install -y docker.io" >&2
	exit 1
fi

if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
	echo "start-dockerd: dockerd (pid $(cat "$pidfile")) is starting; waiting for it" >&2
	started=""
else
	echo "start-dockerd: starting dockerd in the background (log: $log, pid file: $pidfile)" >&2
	nohup dockerd >"$log" 2>&1 </dev/null &
	started=$!
	echo "$started" >"$pidfile"
fi

for _ in $(seq 1 "$wait_seconds"); do
	if docker info >/dev/null 2>&1; then
		echo "start-dockerd: docker engine is ready (pid $(cat "$pidfile"))" >&2
		if [ -n "$started" ]; then
			echo "$started"
		fi
		exit 0
	fi
	if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
		echo "start-dockerd: dockerd exited; last lines of $log:" >&2
		tail -n 20 "$log" >&2 || true
		exit 1
	fi
	sleep 1
done

echo "start-dockerd: docker engine did not answer within ${wait_seconds}s; last lines of $log:" >&2
tail -n 20 "$log" >&2 || true
if [ -n "$started" ]; then
	echo "start-dockerd: stopping the dockerd it started (pid $started)" >&2
	kill "$started" 2>/dev/null || true
fi
exit 1
