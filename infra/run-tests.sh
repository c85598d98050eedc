#!/usr/bin/env bash
# `make test`: every test, in two pytest processes at once on the machine's two cores. The `integration` tests (real
# services: Ceph RGW, a Spark cluster, Airflow's scheduler, a browser) mostly wait on other processes; the rest mostly
# compute. One after the other they took 40 minutes (2026-12-02); side by side their sum of waits overlaps. Each has
# its own Airflow home (tests/conftest.py: RMQ_TEST_AIRFLOW_HOME); the services' fixtures are used by the integration
# process only. Integration tests marked `compute` (classic Spark in the test process: engine parity) run with the rest
# so that both processes take about as long. The integration run prints as it goes; the other's output follows it.
# Exits non-zero when either fails.
set -u
cd "$(dirname "$0")/.."
PY=.venv/bin/python
mkdir -p var
log=var/test-not-integration.log
RMQ_TEST_AIRFLOW_HOME=var/airflow-test-unit "$PY" -m pytest -q -p no:cacheprovider --durations=15 -m "not integration or compute" \
  "$@" >"$log" 2>&1 &
unit=$!
echo "== tests not marked integration: running beside, output in $log (shown at the end)"
"$PY" -m pytest -q -p no:cacheprovider --durations=15 -m "integration and not compute" "$@"
integration=$?
while kill -0 "$unit" 2>/dev/null; do
  echo "== tests not marked integration: still running: $(tail -c 100 "$log" | tr -d '\n')"
  sleep 8
done
wait "$unit"
rest=$?
echo "== tests not marked integration (exit $rest):"
cat "$log"
echo "== integration exit $integration, others exit $rest"
[ "$integration" -eq 0 ] && [ "$rest" -eq 0 ]
