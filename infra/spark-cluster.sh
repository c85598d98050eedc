#!/usr/bin/env bash
# A real Apache Spark standalone cluster on 127.0.0.1, run from the pip pyspark package (no download):
# one Master, one or more Workers (2 cores, 2g each) and a Spark Connect server whose driver uses that cluster.
#
#   infra/spark-cluster.sh start   start (or reuse) it; prints `export SPARK_REMOTE=sc://127.0.0.1:PORT`
#                                  (also in $SPARK_CLUSTER_DIR/env) and the start time on stderr
#   infra/spark-cluster.sh stop    stop the process groups it started and wait for them (idempotent)
#   infra/spark-cluster.sh env     print the export line of the running cluster
#
# Settings (environment): SPARK_CLUSTER_DIR (state, logs, pids, work dirs; default <project>/var/spark-cluster),
# PYTHON (default <project>/.venv/bin/python; its pyspark package is SPARK_HOME), SPARK_WORKER_CORES (2),
# SPARK_WORKER_MEMORY (2g), SPARK_WORKERS (1: how many workers, each with those cores and memory), SPARK_CONNECT_WAIT_S (300: how long the Connect server may take to answer; a failed
# start is retried once on fresh ports), SPARK_DRIVER_JAVA_OPTS (-XX:+UseSerialGC -XX:TieredStopAtLevel=1) and
# SPARK_EXECUTOR_JAVA_OPTS (-XX:+UseSerialGC): JVM flags for a small host, where the JVMs' own threads take the cores
# the tasks need. The Connect server plans and compiles each query once: C2's compile threads spent more CPU on that
# than they saved (scale-8 ingest on 2 workers of 1 core, 2 cores: 47.5 -> 41.9 s with C1 only; its CPU 39 -> 20 s
# over two ingests); 1 GiB heaps need no parallel collector (G1 everywhere: 53.8 s). Executors keep C2 for their
# long scans. On a cluster of its own, set both to "" (the JVM defaults). Needs Java 17 (infra/install-debian-deps.sh). No Delta jars: Maven is not reachable
# here, so jobs on this cluster use RMQ_RECON_FORMAT=parquet (or pass --packages io.delta:... where it is).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${SPARK_CLUSTER_DIR:-$ROOT/var/spark-cluster}
PY=${PYTHON:-$ROOT/.venv/bin/python}
CORES=${SPARK_WORKER_CORES:-2}
MEM=${SPARK_WORKER_MEMORY:-2g}
WORKERS=${SPARK_WORKERS:-1}
PROCS=(connect worker master)   # stop order
for ((w = 2; w <= WORKERS; w++)); do PROCS=(connect "worker$w" "${PROCS[@]:1}"); done

log() { echo "spark-cluster: $*" >&2; }
die() { log "$*"; [ -d "$DIR/log" ] && log "logs in $DIR/log"; exit 1; }
# The last lines of each log, so a failed start in CI shows its cause without the state folder.
show_logs() {
    local f
    for f in "$DIR"/log/*.out; do
        [ -s "$f" ] || continue
        echo "----- last lines of $f" >&2
        grep -v ' INFO ' "$f" | tail -n 40 >&2 || true
    done
}
freeports() { "$PY" "$ROOT/infra/freeport.py" "$1"; }
now() { date +%s.%N; }
elapsed() { "$PY" -c "import sys;print(round($(now)-float(sys.argv[1]),1))" "$1"; }

# PID (= process group id) of a process we started, if it is still ours (never trust a recycled PID).
alive_pid() {
    local pid
    [ -f "$DIR/$1.pid" ] || return 1
    pid=$(cat "$DIR/$1.pid")
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$DIR/conf/spark-defaults.conf" || return 1
    echo "$pid"
}

remote() { sed -n 's/^export SPARK_REMOTE=//p' "$DIR/env" 2>/dev/null; }

# Whether sc://... answers a query (a fresh Connect session that runs one tiny job on the cluster).
answers() {
    timeout 120 "$PY" - "$1" <<'PY' >>"$DIR/log/probe.out" 2>&1
import sys
from pyspark.sql import SparkSession
s = SparkSession.builder.remote(sys.argv[1]).create()
try:
    assert s.range(10).selectExpr("sum(id) AS n").collect()[0]["n"] == 45
finally:
    s.stop()
PY
}

running() {
    local url
    for p in "${PROCS[@]}"; do alive_pid "$p" >/dev/null || return 1; done
    url=$(remote); [ -n "$url" ] && answers "$url"
}

cmd_stop() {
    local pids=() pid
    for p in "${PROCS[@]}"; do
        if pid=$(alive_pid "$p"); then
            kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
            for _ in $(seq 100); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
        fi
        rm -f "$DIR/$p.pid"
    done
    for pid in "${pids[@]}"; do
        if [ -d "/proc/$pid" ] || pgrep -g "$pid" >/dev/null 2>&1; then
            kill -KILL -- "-$pid" 2>/dev/null || true
        fi
        for _ in $(seq 50); do pgrep -g "$pid" >/dev/null 2>&1 || break; sleep 0.1; done
    done
    [ ${#pids[@]} -gt 0 ] && log "stopped (process groups ${pids[*]})"
    rm -f "$DIR/env"
    return 0
}

cmd_env() {
    running || die "not running (start it with: infra/spark-cluster.sh start)"
    cat "$DIR/env"
}

# Start "$@" in a new session (so it leads its own process group) with output to log/$name.out.
launch() {
    local name=$1 pid; shift
    setsid "$@" </dev/null >"$DIR/log/$name.out" 2>&1 &
    pid=$!
    echo "$pid" > "$DIR/$name.pid"
    # Until the child has exec'd, its cmdline is this script's, and alive_pid would call it gone (a loaded machine
    # made the Connect server "exit" at once, twice, with an empty log): wait for the exec (or the exit) first.
    for _ in $(seq 200); do
        alive_pid "$name" >/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.05
    done
}

cmd_start() {
    [ -x "$PY" ] || die "no python at $PY (run make install, or set PYTHON)"
    java -version >/dev/null 2>&1 || die "java not found: run infra/install-debian-deps.sh"
    mkdir -p "$DIR/log"
    if running; then
        log "already running at $(remote)"
        cat "$DIR/env"
        return 0
    fi
    cmd_stop
    local attempt why
    for attempt in 1 2; do
        # A port picked free can be taken before its server binds it (the driver binds ephemeral ports too):
        # a second attempt uses fresh ports. Logs of a failed attempt are shown before they are cleared.
        if why=$(start_once); then cat "$DIR/env"; return 0; fi
        log "attempt $attempt failed: $why"
        show_logs
        cmd_stop
    done
    die "could not start the cluster (see the log lines above)"
}

# One start with fresh ports; prints the reason and returns 1 on failure (the caller stops what started).
start_once() {
    local t0 mport mui wport wui cport url
    t0=$(now)
    SPARK_HOME=$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
    export SPARK_HOME
    ls "$SPARK_HOME/jars" | grep -q '^spark-connect_' \
        || { echo "no spark-connect jar in $SPARK_HOME/jars: install pyspark (not only pyspark-client)"; return 1; }
    rm -rf "$DIR"; mkdir -p "$DIR"/{log,conf,work,tmp}
    local ports
    ports=$(freeports 3) || { echo "no free ports"; return 1; }
    mport=$(sed -n 1p <<<"$ports"); mui=$(sed -n 2p <<<"$ports"); cport=$(sed -n 3p <<<"$ports")
    cat > "$DIR/conf/spark-defaults.conf" <<CONF
spark.master.rest.enabled        false
spark.ui.enabled                 false
spark.ui.showConsoleProgress     false
spark.local.dir                  $DIR/tmp
spark.driver.host                127.0.0.1
spark.driver.bindAddress         127.0.0.1
spark.driver.memory              1g
spark.executor.memory            1g
spark.sql.shuffle.partitions     4
spark.sql.session.timeZone       UTC
spark.worker.cleanup.enabled     false
spark.executorEnv.PYTHONPATH     $ROOT
spark.driver.extraJavaOptions    ${SPARK_DRIVER_JAVA_OPTS--XX:+UseSerialGC -XX:TieredStopAtLevel=1}
spark.executor.extraJavaOptions  ${SPARK_EXECUTOR_JAVA_OPTS--XX:+UseSerialGC}
CONF
    export SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=localhost SPARK_MASTER_HOST=127.0.0.1
    export SPARK_CONF_DIR="$DIR/conf" SPARK_WORKER_DIR="$DIR/work" SPARK_LOG_DIR="$DIR/log" SPARK_PID_DIR="$DIR"
    export SPARK_DAEMON_MEMORY=512m PYSPARK_PYTHON="$PY" PYSPARK_DRIVER_PYTHON="$PY"
    export SPARK_NO_DAEMONIZE=1

    launch master "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
        --host 127.0.0.1 --port "$mport" --webui-port "$mui" --properties-file "$DIR/conf/spark-defaults.conf"
    local ok=""
    for _ in $(seq 240); do
        if curl -s --max-time 2 "http://127.0.0.1:$mui/json/" | grep -q '"status" *: *"ALIVE"'; then ok=1; break; fi
        alive_pid master >/dev/null || break
        sleep 0.25
    done
    [ -n "$ok" ] || { echo "the master did not come up on 127.0.0.1:$mport"; return 1; }

    local w name
    for ((w = 1; w <= WORKERS; w++)); do
        name=worker; [ "$w" -gt 1 ] && name="worker$w"
        ports=$(freeports 2) || { echo "no free ports"; return 1; }
        wport=$(sed -n 1p <<<"$ports"); wui=$(sed -n 2p <<<"$ports")
        mkdir -p "$DIR/work/$name"
        launch "$name" "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
            --host 127.0.0.1 --port "$wport" --webui-port "$wui" --cores "$CORES" --memory "$MEM" \
            --work-dir "$DIR/work/$name" --properties-file "$DIR/conf/spark-defaults.conf" "spark://127.0.0.1:$mport"
    done
    ok=""
    for _ in $(seq 240); do
        if curl -s --max-time 2 "http://127.0.0.1:$mui/json/" | grep -q "\"aliveworkers\" *: *$WORKERS"; then ok=1; break; fi
        alive_pid worker >/dev/null || break
        sleep 0.25
    done
    [ -n "$ok" ] || { echo "the $WORKERS worker(s) did not register with the master"; return 1; }

    launch connect "$SPARK_HOME/bin/spark-submit" --master "spark://127.0.0.1:$mport" \
        --properties-file "$DIR/conf/spark-defaults.conf" \
        --class org.apache.spark.sql.connect.service.SparkConnectServer --name rmq-recon-connect \
        --conf spark.connect.grpc.binding.address=127.0.0.1 --conf "spark.connect.grpc.binding.port=$cport" \
        spark-internal
    url="sc://127.0.0.1:$cport"
    ok=""
    local deadline=$((SECONDS + ${SPARK_CONNECT_WAIT_S:-300}))
    while [ "$SECONDS" -lt "$deadline" ]; do
        alive_pid connect >/dev/null || { echo "the Spark Connect server exited (log/connect.out)"; return 1; }
        grep -q 'BindException\|Address already in use' "$DIR/log/connect.out" \
            && { echo "the Spark Connect server could not bind 127.0.0.1:$cport (taken)"; return 1; }
        if (exec 3<>"/dev/tcp/127.0.0.1/$cport") 2>/dev/null && answers "$url"; then ok=1; break; fi
        sleep 1
    done
    [ -n "$ok" ] || { echo "the Spark Connect server did not answer a query at $url within ${SPARK_CONNECT_WAIT_S:-300} s"; return 1; }
    echo "export SPARK_REMOTE=$url" > "$DIR/env.tmp"
    mv "$DIR/env.tmp" "$DIR/env"
    log "started in $(elapsed "$t0") s: master spark://127.0.0.1:$mport (ui :$mui), $WORKERS worker(s) of $CORES cores $MEM," \
        "connect $url (pids master=$(cat "$DIR/master.pid") worker=$(cat "$DIR/worker.pid") connect=$(cat "$DIR/connect.pid"))"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    env) cmd_env ;;
    *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
