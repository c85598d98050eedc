#!/usr/bin/env bash
# Debian packages the integration tests need, installed only when missing (idempotent, quiet when done).
#
#   radosgw ceph-mon ceph-osd     one-node Ceph + RGW for the S3 integration tests (infra/ceph-rgw.sh)
#   openjdk-17-jre-headless       the JVM of the Spark standalone cluster (infra/spark-cluster.sh)
#   curl                          readiness probes in infra/ceph-rgw.sh
#   chromium                      the headless browser of the dashboard tests (tests/test_dashboard_browser.py)
#   prometheus-pushgateway        the Pushgateway the metrics test pushes to and reads back (tests/jobs/test_metrics.py)
#   openssh-server                the broker host the snapshot DAG exports from over SSH (infra/sshd.sh; its own
#                                 sshd on 127.0.0.1, never the system's service)
#
# Works unattended (CI=true, no stdin). Needs root, or sudo without a password, only when something is missing.
set -euo pipefail

missing=()
command -v radosgw >/dev/null 2>&1 || missing+=(radosgw)
command -v ceph-mon >/dev/null 2>&1 || missing+=(ceph-mon)
command -v ceph-osd >/dev/null 2>&1 || missing+=(ceph-osd)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v prometheus-pushgateway >/dev/null 2>&1 || missing+=(prometheus-pushgateway)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
if ! java -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])'; then
    missing+=(openjdk-17-jre-headless)
fi

[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "install-debian-deps: missing ${missing[*]}; run as root: apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
fi

echo "install-debian-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
HB="$(dirname "$0")/with-heartbeat.sh"
"$HB" "install-debian-deps: apt-get update" $SUDO apt-get update -qq </dev/null >/dev/null
"$HB" "install-debian-deps: apt-get install" $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    </dev/null >/dev/null
echo "install-debian-deps: done" >&2
