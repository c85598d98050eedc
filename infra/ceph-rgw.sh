#!/usr/bin/env bash
# A throwaway S3 endpoint: one-node Ceph (1 monitor, 1 in-memory OSD, auth off) + radosgw on 127.0.0.1.
#
#   infra/ceph-rgw.sh start   start (or reuse) it; prints `export AWS_...` lines on stdout, also in $RGW_DIR/env
#   infra/ceph-rgw.sh stop    stop the processes it recorded and wait for them (idempotent)
#   infra/ceph-rgw.sh env     print the export lines of the running instance
#
# Settings (environment): RGW_DIR (state, logs, pids; default <project>/var/rgw), RGW_ACCESS_KEY (rmqrecon),
# RGW_SECRET_KEY (rmqrecon-secret), RGW_PORT (default: a free port). Needs `radosgw ceph-mon ceph-osd`
# (infra/install-debian-deps.sh). Everything lives in memory: stop loses all objects. Starts in ~15 s; a start whose
# daemon dies (a port taken between the check and its bind) is stopped and tried again on fresh ports, 3 times.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RGW_DIR=${RGW_DIR:-$ROOT/var/rgw}
ACCESS_KEY=${RGW_ACCESS_KEY:-rmqrecon}
SECRET_KEY=${RGW_SECRET_KEY:-rmqrecon-secret}
DAEMONS=(rgw osd mon)   # stop order

log() { echo "ceph-rgw: $*" >&2; }
die() { log "$*"; [ -d "$RGW_DIR/log" ] && log "logs in $RGW_DIR/log"; exit 1; }
freeports() { python3 "$ROOT/infra/freeport.py" "$1"; }
now() { date +%s.%N; }
elapsed() { python3 -c "import sys;print(round($(now)-float(sys.argv[1]),1))" "$1"; }

# PID of a daemon we started, if it is still that daemon (never trust a recycled PID).
alive_pid() {
    local name=$1 pid
    [ -f "$RGW_DIR/$name.pid" ] || return 1
    pid=$(cat "$RGW_DIR/$name.pid")
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$RGW_DIR/ceph.conf" || return 1
    echo "$pid"
}

endpoint() { sed -n 's/^export AWS_ENDPOINT_URL=//p' "$RGW_DIR/env" 2>/dev/null; }

running() {
    local ep
    for d in "${DAEMONS[@]}"; do alive_pid "$d" >/dev/null || return 1; done
    ep=$(endpoint); [ -n "$ep" ] && curl -s -o /dev/null --max-time 2 "$ep/"
}

cmd_stop() {
    local pids=() pid
    for d in "${DAEMONS[@]}"; do
        if pid=$(alive_pid "$d"); then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
            # radosgw and the osd talk to the monitor while shutting down: give each a moment in order.
            for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
        fi
        rm -f "$RGW_DIR/$d.pid"
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 100); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
        if [ -d "/proc/$pid" ]; then kill -KILL "$pid" 2>/dev/null || true; fi
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    done
    [ ${#pids[@]} -gt 0 ] && log "stopped (pids ${pids[*]})"
    rm -f "$RGW_DIR/env"
    return 0
}

cmd_env() {
    running || die "not running (start it with: infra/ceph-rgw.sh start)"
    cat "$RGW_DIR/env"
}

# The last lines of a log, indented, for a one-look failure message.
tail_of() { [ -s "$1" ] && tail -n "${2:-5}" "$1" | sed 's/^/    /' >&2; return 0; }

# One start on fresh ports. Prints the reason and returns 1 on failure; the caller stops what started.
start_once() {
    local D C monp monp2 rgwp fsid osduuid ports
    D=$RGW_DIR
    rm -rf "$D"; mkdir -p "$D"/{mon.a,osd0,log,run}
    ports=$(freeports 3) || { log "no free ports"; return 1; }
    monp=$(sed -n 1p <<<"$ports"); monp2=$(sed -n 2p <<<"$ports"); rgwp=${RGW_PORT:-$(sed -n 3p <<<"$ports")}
    fsid=$(python3 -c 'import uuid;print(uuid.uuid4())')
    cat > "$D/ceph.conf" <<CONF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$monp2,v1:127.0.0.1:$monp]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = true
keyring = $D/keyring
run dir = $D/run
admin socket = $D/run/\$name.asok
log file = $D/log/\$name.log
pid file = $D/run/\$name.pid
mon data = $D/mon.\$id
osd data = $D/osd\$id
osd objectstore = memstore
memstore device bytes = 4294967296
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon allow pool delete = true
mon max pg per osd = 1000
mon warn on pool no redundancy = false
mon data avail warn = 1
# The monitor exits when its disk has under 5% free (CI machines often do): this throwaway cluster keeps its objects
# in memory, so let it run.
mon data avail crit = 0
osd crush chooseleaf type = 0
osd memory target = 1073741824
ms bind ipv6 = false
ms mon client mode = crc
ms client mode = crc
[client.rgw]
# tcp_nodelay: without it a small response waits ~40 ms for the client's delayed ACK (Nagle): a GET 45 -> 2.6 ms
rgw frontends = beast endpoint=127.0.0.1:$rgwp tcp_nodelay=1
rgw data = $D/rgw
rgw enable usage log = false
CONF
    C=(-c "$D/ceph.conf")
    ceph-authtool --create-keyring "$D/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null || return 1
    ceph-authtool "$D/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' \
        >/dev/null || return 1
    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$monp2,v1:127.0.0.1:$monp]" "$D/monmap" >/dev/null \
        || return 1
    ceph-mon "${C[@]}" --mkfs -i a --monmap "$D/monmap" --keyring "$D/keyring" > "$D/log/mon-mkfs.out" 2>&1 \
        || { log "ceph-mon --mkfs failed"; tail_of "$D/log/mon-mkfs.out"; return 1; }
    # setsid: each daemon in its own session, so a Ctrl-C aimed at the caller does not half-kill the cluster.
    setsid ceph-mon "${C[@]}" -i a -f </dev/null > "$D/log/mon.out" 2>&1 & echo $! > "$D/mon.pid"
    local up=""
    for _ in $(seq 120); do
        alive_pid mon >/dev/null || { log "the monitor exited at start (ports $monp2, $monp)"; tail_of "$D/log/mon.out"
                                      return 1; }
        if timeout 10 ceph "${C[@]}" mon stat </dev/null >/dev/null 2>"$D/log/mon-stat.err"; then up=1; break; fi
        sleep 0.5
    done
    [ -n "$up" ] || { log "the monitor did not answer within 60 s"; tail_of "$D/log/mon-stat.err"; return 1; }
    osduuid=$(python3 -c 'import uuid;print(uuid.uuid4())')
    timeout 60 ceph "${C[@]}" osd new "$osduuid" </dev/null >/dev/null 2>"$D/log/osd-new.err" \
        || { log "the monitor did not answer within 60 s (ceph osd new)"; tail_of "$D/log/osd-new.err"; return 1; }
    ceph-osd "${C[@]}" -i 0 --mkfs --osd-uuid "$osduuid" </dev/null > "$D/log/osd-mkfs.out" 2>&1 \
        || { log "ceph-osd --mkfs failed"; tail_of "$D/log/osd-mkfs.out"; return 1; }
    setsid ceph-osd "${C[@]}" -i 0 -f </dev/null > "$D/log/osd.out" 2>&1 & echo $! > "$D/osd.pid"
    up=""
    for _ in $(seq 120); do
        if timeout 10 ceph "${C[@]}" osd stat </dev/null 2>/dev/null | grep -q '1 up'; then up=1; break; fi
        alive_pid osd >/dev/null || break
        sleep 1
    done
    [ -n "$up" ] || { log "the OSD did not come up within 120 s"; tail_of "$D/log/osd.out"; return 1; }
    setsid radosgw "${C[@]}" -n client.rgw -f </dev/null > "$D/log/rgw.out" 2>&1 & echo $! > "$D/rgw.pid"
    local ep="http://127.0.0.1:$rgwp" ok=""
    for _ in $(seq 480); do
        if curl -s -o /dev/null --max-time 2 "$ep/"; then ok=1; break; fi
        alive_pid rgw >/dev/null || break
        sleep 0.25
    done
    [ -n "$ok" ] || { log "radosgw did not answer on $ep within 120 s"; tail_of "$D/log/rgw.out"; return 1; }
    timeout 60 radosgw-admin "${C[@]}" user create --uid=rmqrecon --display-name=rmqrecon \
        --access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" </dev/null >/dev/null 2>"$D/log/user-create.err" \
        || { log "radosgw-admin user create failed"; tail_of "$D/log/user-create.err"; return 1; }
    cat > "$D/env.tmp" <<ENV
export AWS_ENDPOINT_URL=$ep
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
export AWS_REGION=us-east-1
export AWS_ALLOW_HTTP=true
ENV
    mv "$D/env.tmp" "$D/env"
}

cmd_start() {
    if running; then
        log "already running at $(endpoint)"
        cat "$RGW_DIR/env"
        return 0
    fi
    for bin in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool ceph-authtool curl; do
        command -v "$bin" >/dev/null || die "$bin not found: run infra/install-debian-deps.sh (apt-get install -y radosgw ceph-mon ceph-osd)"
    done
    cmd_stop
    local t0 attempt
    t0=$(now)
    for attempt in 1 2 3; do
        if start_once; then
            log "started in $(elapsed "$t0") s at $(endpoint) (pids mon=$(cat "$RGW_DIR/mon.pid")" \
                "osd=$(cat "$RGW_DIR/osd.pid") rgw=$(cat "$RGW_DIR/rgw.pid"))"
            cat "$RGW_DIR/env"
            return 0
        fi
        cmd_stop
        [ "$attempt" -lt 3 ] && log "start attempt $attempt failed; trying again on fresh ports"
    done
    die "did not start in 3 attempts"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    env) cmd_env ;;
    *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
