#!/usr/bin/env bash
# A real OpenSSH server on 127.0.0.1: the "broker host" the snapshot DAG's export test reaches over SSH (issue 37).
#
#   infra/sshd.sh start DIR PORT   host and client keys, sshd_config and the log under DIR; starts /usr/sbin/sshd
#                                  there and waits until it answers. Only the running user may log in, with the
#                                  client key DIR/client_ed25519 (no password, no PAM). Prints the host's public key.
#   infra/sshd.sh stop DIR         stops it
#
# openssh-server comes from Debian (infra/install-debian-deps.sh).
set -euo pipefail

cmd=${1:?usage: infra/sshd.sh start DIR PORT | stop DIR}
dir=${2:?usage: infra/sshd.sh start DIR PORT | stop DIR}
SSHD=/usr/sbin/sshd

stop() {
    if [ -f "$dir/sshd.pid" ]; then
        kill "$(cat "$dir/sshd.pid")" 2>/dev/null || true
        rm -f "$dir/sshd.pid"
    fi
}

case "$cmd" in
stop)
    stop
    ;;
start)
    port=${3:?usage: infra/sshd.sh start DIR PORT}
    if [ ! -x "$SSHD" ]; then
        echo "sshd.sh: $SSHD is missing; run infra/install-debian-deps.sh (Debian openssh-server)" >&2
        exit 1
    fi
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    stop
    [ -f "$dir/host_ed25519" ] || ssh-keygen -q -t ed25519 -N "" -f "$dir/host_ed25519"
    [ -f "$dir/client_ed25519" ] || ssh-keygen -q -t ed25519 -N "" -f "$dir/client_ed25519"
    cp "$dir/client_ed25519.pub" "$dir/authorized_keys"
    chmod 600 "$dir/authorized_keys"
    # run as root, sshd wants its privilege separation folder
    [ "$(id -u)" -ne 0 ] || mkdir -p /run/sshd
    cat >"$dir/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $dir/host_ed25519
PidFile $dir/sshd.pid
AuthorizedKeysFile $dir/authorized_keys
AllowUsers $(id -un)
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
LogLevel ERROR
EOF
    "$SSHD" -t -f "$dir/sshd_config"
    "$SSHD" -f "$dir/sshd_config" -E "$dir/sshd.log"
    for _ in $(seq 1 100); do
        if ssh-keyscan -T 1 -p "$port" 127.0.0.1 >/dev/null 2>&1; then
            cut -d' ' -f1,2 "$dir/host_ed25519.pub"
            exit 0
        fi
        sleep 0.1
    done
    echo "sshd.sh: sshd did not answer on 127.0.0.1:$port within 10 s; see $dir/sshd.log" >&2
    exit 1
    ;;
*)
    echo "usage: infra/sshd.sh start DIR PORT | stop DIR" >&2
    exit 2
    ;;
esac
