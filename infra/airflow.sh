#!/usr/bin/env bash
# Start or stop real Airflow services for this project on loopback: scheduler (LocalExecutor), dag-processor and
# api-server, with SQLite as the metadata DB under $AIRFLOW_HOME (default ./var/airflow).
#   infra/airflow.sh start   -> prints `export ...` lines (also written to $AIRFLOW_HOME/env)
#   infra/airflow.sh stop    -> stops every process it started (by PID, process groups), waits
#   infra/airflow.sh env     -> prints the env file
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$ROOT/var/airflow}"
BIN="${AIRFLOW_BIN:-$ROOT/.venv/bin}"
RUN="$AIRFLOW_HOME/run"
freeport() { "$BIN/python" "$ROOT/infra/freeport.py"; }

stop() {
  [ -d "$RUN" ] || return 0
  for f in "$RUN"/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done
  for f in "$RUN"/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    rm -f "$f"
  done
}

# A location the DAGs' Params default to: s3:// as it is, a folder made absolute from the project root (the
# services' working folder is not the shell's).
where() {
  case "$1" in
    s3://*|/*) printf '%s' "$1" ;;
    *) printf '%s' "$ROOT/$1" ;;
  esac
}

start() {
  stop
  mkdir -p "$RUN" "$AIRFLOW_HOME/logs"
  # Where `make demo` put its landing zone, lake and reports (written by jobs/demo.py): the services serve the demo's
  # data unless RMQ_RECON_LANDING / _LAKE / _REPORTS are set.
  if [ -f "$AIRFLOW_HOME/rmq-recon.env" ]; then
    while IFS='=' read -r name value; do
      case "$name" in
        RMQ_RECON_LANDING|RMQ_RECON_LAKE|RMQ_RECON_REPORTS) [ -n "${!name:-}" ] || export "$name=$value" ;;
      esac
    done < "$AIRFLOW_HOME/rmq-recon.env"
  fi
  local port secret
  port="${AIRFLOW_API_PORT:-$(freeport)}"
  secret="$("$BIN/python" -c 'import secrets;print(secrets.token_hex(16))')"
  cat > "$AIRFLOW_HOME/env" <<ENV
export AIRFLOW_HOME="$AIRFLOW_HOME"
export AIRFLOW__CORE__DAGS_FOLDER="$ROOT/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__EXECUTOR=LocalExecutor
export AIRFLOW__CORE__PARALLELISM=4
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AIRFLOW_HOME/airflow.db"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS=infra.airflow_sqlite.CONNECT_ARGS
export AIRFLOW__API__PORT=$port
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$port"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$port/execution/"
export AIRFLOW__API_AUTH__JWT_SECRET="$secret"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=True
export AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK=False
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=5
export AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC=2
export RUST_LOG="${RUST_LOG:-warn,sail_common::actor=error}"  # Sail's warnings, not its shutdown notice
export PYTHONPATH="$ROOT\${PYTHONPATH:+:\$PYTHONPATH}"
export RMQ_RECON_LANDING="$(where "${RMQ_RECON_LANDING:-var/landing}")"
export RMQ_RECON_LAKE="$(where "${RMQ_RECON_LAKE:-var/lake}")"
export RMQ_RECON_REPORTS="$(where "${RMQ_RECON_REPORTS:-var/reports}")"
ENV
  # shellcheck disable=SC1091
  source "$AIRFLOW_HOME/env"
  "$BIN/airflow" db migrate > "$AIRFLOW_HOME/logs/migrate.log" 2>&1
  local t0=$SECONDS
  for svc in api-server scheduler dag-processor; do
    local args=("$svc")
    [ "$svc" = api-server ] && args+=(--port "$port" --host 127.0.0.1)
    setsid "$BIN/airflow" "${args[@]}" > "$AIRFLOW_HOME/logs/$svc.out" 2>&1 < /dev/null &
    echo $! > "$RUN/$svc.pid"
  done
  for _ in $(seq 240); do
    curl -fs -o /dev/null "http://127.0.0.1:$port/api/v2/version" && break
    sleep 0.5
  done
  curl -fs -o /dev/null "http://127.0.0.1:$port/api/v2/version" || { echo "api-server did not start; see $AIRFLOW_HOME/logs" >&2; exit 1; }
  echo "# airflow services up in $((SECONDS - t0)) s (api-server http://127.0.0.1:$port)" >&2
  cat "$AIRFLOW_HOME/env"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env) cat "$AIRFLOW_HOME/env" ;;
  *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
