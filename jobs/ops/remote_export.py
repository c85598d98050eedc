"""The snapshot DAG takes the snapshot itself: ``rmq-recon export`` run on each broker host over SSH (issue 37).

Each host is one entry of the DAG's ``export_hosts`` Param (default: ``$RMQ_RECON_EXPORT_HOSTS``, a JSON list): the
Airflow SSH connection that reaches it, the broker's store folder there, and its cluster and broker names. The run
picks one snapshot time for every host before the exports start, so a retried export (same time) finishes the
folder a killed one began, or does nothing when it was complete (jobs.export.store: a rerun of the last export). The
landing URI is the DAG's own; the host writes to it with its own credentials (environment or instance role): none
travel on the command line.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shlex
from typing import Any

from jobs.problems import FinalError, UsageError

FIELDS = ("conn_id", "store", "cluster", "broker")
OPTIONAL = ("state", "command")
TIMEOUT_S = 3600  # one export: the first run on a host decodes its retained segments

# the Param's JSON schema: Airflow checks a triggered run's conf against it before any task runs
SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {"type": "object", "required": list(FIELDS),
              "properties": {k: {"type": "string", "minLength": 1} for k in FIELDS + OPTIONAL},
              "additionalProperties": False},
}


class RemoteUsageError(FinalError):
    """The host's ``rmq-recon export`` refused its options (exit 2): the same command fails again on retry."""


def default_hosts() -> list[dict[str, str]]:
    """``$RMQ_RECON_EXPORT_HOSTS`` (a JSON list of hosts), or none: the landing zone is filled by other means."""
    raw = os.environ.get("RMQ_RECON_EXPORT_HOSTS", "").strip()
    if not raw:
        return []
    try:
        return hosts(json.loads(raw))
    except (ValueError, UsageError) as e:
        raise UsageError(f"RMQ_RECON_EXPORT_HOSTS: {e}") from None


def hosts(value: Any) -> list[dict[str, str]]:
    """The hosts of the Param, checked: every field a non-empty string, one entry per (cluster, broker)."""
    if not isinstance(value, list):
        raise UsageError(f"--export-hosts {value!r}: expected a JSON list of hosts")
    out, seen = [], set()
    for i, h in enumerate(value):
        if not isinstance(h, dict):
            raise UsageError(f"--export-hosts entry {i}: expected an object with {', '.join(FIELDS)}")
        missing = [k for k in FIELDS if not (isinstance(h.get(k), str) and h[k])]
        unknown = sorted(set(h) - set(FIELDS + OPTIONAL))
        why = [f"{label} {', '.join(keys)}" for label, keys in (("missing", missing), ("unknown", unknown)) if keys]
        if why:
            raise UsageError(f"--export-hosts entry {i}: {'; '.join(why)}")
        key = (h["cluster"], h["broker"])
        if key in seen:
            raise UsageError(f"--export-hosts entry {i}: cluster {key[0]} broker {key[1]} is listed twice")
        seen.add(key)
        out.append({k: h[k] for k in FIELDS + OPTIONAL if k in h})
    return out


def snapshot_stamp(value: str = "", now: dt.datetime | None = None) -> str:
    """The run's one snapshot time (YYYYMMDDTHHMMSSZ), taken before the exports start: ``value`` (a replay of a
    copied store history names its times) or now."""
    if value:
        from jobs.export import layout

        now = layout.snapshot_ts_option(value)
    return (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def command(host: dict[str, str], landing: str, stamp: str, default_command: str = "rmq-recon") -> str:
    """The shell command the host runs (every value quoted)."""
    argv = [*shlex.split(host.get("command") or default_command), "export", "--store", host["store"],
            "--broker", host["broker"], "--cluster", host["cluster"], "--to", landing, "--snapshot-ts", stamp]
    if host.get("state"):
        argv += ["--state", host["state"]]
    return shlex.join(argv)


def run(host: dict[str, str], landing: str, stamp: str, *, default_command: str = "rmq-recon",
        timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """Run the export on ``host`` through its Airflow SSH connection; the export's summary (its JSON on stdout).

    Raises:
        RemoteUsageError: the host's command refused its options (exit 2; not retried).
        RuntimeError: any other failure (unreachable host, a stopped or failed export; retried by Airflow).
    """
    from airflow.providers.ssh.hooks.ssh import SSHHook

    cmd = command(host, landing, stamp, default_command)
    where = f"{host['cluster']}/{host['broker']} on {host['conn_id']}"
    hook = SSHHook(ssh_conn_id=host["conn_id"], cmd_timeout=timeout_s)
    try:
        with hook.get_conn() as client:
            code, out, err = hook.exec_ssh_client_command(client, cmd, get_pty=False, environment=None,
                                                          timeout=timeout_s)
    except Exception as e:  # noqa: BLE001 - one line: which host, what went wrong
        raise RuntimeError(f"export of {where}: {type(e).__name__}: {' '.join(str(e).split())[:500]}; check the "
                           f"connection {host['conn_id']} and that the host is up") from e
    lines = err.decode(errors="replace").strip().splitlines()
    last = lines[-1] if lines else "(no output)"
    if code == 2:
        raise RemoteUsageError(f"export of {where} refused its options: {last}")
    if code != 0:
        raise RuntimeError(f"export of {where} exited {code}: {last}")
    try:
        summary = json.loads(out.decode())
    except ValueError:
        raise RuntimeError(f"export of {where}: its output is not the export's summary: "
                           f"{out.decode(errors='replace')[:200]!r}") from None
    return {"conn_id": host["conn_id"], **summary}
