#!/usr/bin/env bash
# Usage: infra/with-heartbeat.sh "<what>" command [args...]
# Runs the command and prints "<what>: still running (N s)" every 8 s until it ends, so that no step of `make demo`
# or `make test` stays silent for more than 10 s (a quiet pip install took 3 minutes). The heartbeat goes to stderr (the
# command's own output may be sent elsewhere). Exits with the command's status.
set -u
what="$1"; shift
"$@" &
pid=$!
start=$SECONDS
while kill -0 "$pid" 2>/dev/null; do
  for _ in 1 2 3 4 5 6 7 8; do
    kill -0 "$pid" 2>/dev/null || break 2
    sleep 1
  done
  echo "$what: still running ($((SECONDS - start)) s)" >&2
done
wait "$pid"
