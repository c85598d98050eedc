"""Alert job: after a reconcile run, tell people what changed since the previous run, once per run.

Worth a person's attention (and nothing else, so a quiet run sends nothing):
* a queue or group that *enters* WARN, STALL or REWIND (its status differs from the previous run's);
* new ``IN_DLQ`` and ``BLOCKING_COMMIT`` rows of gold/dlq_candidates;
* new ``EXPIRED`` offsets (offsets of EXPIRED ranges the previous run's ranges did not hold: ranges grow);
* a failed expectation of the gold suites (of this run's validation).

Reads: gold/reconcile_runs (the previous completed run), this run's and the previous run's rows of
gold/consumer_status, gold/dlq_candidates and gold/unconsumed_ranges (filtered reads, ``jobs.reconcile.gold_runs``), and
gold/alerts_sent. Writes: gold/alerts_sent, one row per (run, channel) after the channel accepted the message.
Idempotent per run: a re-run of the same run finds its rows and sends nothing again; a channel that failed is
retried alone. The comparison is pure (:func:`changes`, :func:`message`): frames in, rows and text out.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import pandas as pd

from jobs.reconcile import gold_runs, reports, verdict
from schemas import alerts_sent, consumer_status, dlq_candidates, unconsumed_ranges

log = logging.getLogger(__name__)
UTC = dt.timezone.utc

QUEUE = ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id"]
GROUP = ["cluster", "consumer_group"]
ALERT_STATUSES = ("REWIND", "STALL", "WARN")  # worst first, the order a message names them in
# UNKNOWN (no bounds at the newest snapshot, spec §4.2) ranks below OK: a group is UNKNOWN only when every queue is
STATUS_RANK = verdict.STATUS_RANK
DLQ_REASONS = ("IN_DLQ", "BLOCKING_COMMIT", "ORDERLY_BLOCKED")
DLQ_KEY = QUEUE + ["queue_offset", "uniq_key", "reason"]
STATUS_COLUMNS = QUEUE + ["status"]
EXPIRED_COLUMNS = QUEUE + ["start_offset", "end_offset"]
INTEGER_COLUMNS = frozenset({"queue_id", "queue_offset", "start_offset", "end_offset"})


def _typed(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``columns`` of ``df`` with one dtype per column whatever the reader gave (an empty read is float64)."""
    return pd.DataFrame({c: df[c].astype("int64" if c in INTEGER_COLUMNS else object) if c in df.columns
                         else pd.Series([], dtype="int64" if c in INTEGER_COLUMNS else object) for c in columns})


# ------------------------------------------------------------------------------------------- transform


def queues_entering(previous: pd.DataFrame, current: pd.DataFrame) -> pd.DataFrame:
    """Queues whose status is now WARN, STALL or REWIND and was something else (or absent) in the previous run.

    Args:
        previous, current: consumer_status rows (``QUEUE`` + ``status``).
    Returns:
        ``QUEUE`` + ``status``, ``previous_status`` (None for a queue the previous run did not report).
    """
    cur = current[current["status"].isin(ALERT_STATUSES)][STATUS_COLUMNS]
    prev = previous[STATUS_COLUMNS].rename(columns={"status": "previous_status"})
    out = cur.merge(prev, on=QUEUE, how="left")
    out = out[out["status"] != out["previous_status"]]
    out["previous_status"] = out["previous_status"].astype(object).where(out["previous_status"].notna(), None)
    return out.sort_values(QUEUE, kind="mergesort").reset_index(drop=True)


def group_status(status: pd.DataFrame) -> pd.DataFrame:
    """Each group's status: its worst queue (REWIND > STALL > WARN > OK > UNKNOWN, spec §4, §4.2). Columns ``GROUP`` +
    ``status``."""
    if not len(status):
        return _typed(status, GROUP + ["status"])
    ranked = status.assign(_rank=status["status"].map(STATUS_RANK).fillna(0))
    worst = ranked.sort_values(GROUP + ["_rank"], kind="mergesort").groupby(GROUP, sort=True).tail(1)
    return worst[GROUP + ["status"]].sort_values(GROUP, kind="mergesort").reset_index(drop=True)


def groups_entering(previous: pd.DataFrame, current: pd.DataFrame) -> pd.DataFrame:
    """Groups whose status is now WARN, STALL or REWIND and differs from the previous run's (``GROUP`` + ``status``,
    ``previous_status``)."""
    cur = group_status(current)
    prev = group_status(previous).rename(columns={"status": "previous_status"})
    out = cur[cur["status"].isin(ALERT_STATUSES)].merge(prev, on=GROUP, how="left")
    out = out[out["status"] != out["previous_status"]]
    out["previous_status"] = out["previous_status"].astype(object).where(out["previous_status"].notna(), None)
    return out.reset_index(drop=True)


def new_dlq_rows(previous: pd.DataFrame, current: pd.DataFrame) -> pd.DataFrame:
    """IN_DLQ, BLOCKING_COMMIT and ORDERLY_BLOCKED rows of this run whose key (queue, offset, uniq_key, reason) the
    previous run did not report."""
    cur = current[current["reason"].isin(DLQ_REASONS)][DLQ_KEY]
    prev = previous[DLQ_KEY].drop_duplicates().assign(_seen=True)
    out = cur.merge(prev, on=DLQ_KEY, how="left")
    return out[out["_seen"].isna()][DLQ_KEY].sort_values(DLQ_KEY, kind="mergesort").reset_index(drop=True)


def _offsets_outside(ranges: Sequence[tuple[int, int]], covered: Sequence[tuple[int, int]]) -> int:
    """How many offsets of the inclusive ``ranges`` no inclusive range of ``covered`` holds."""
    total = 0
    cov = sorted(covered)
    for start, end in sorted(ranges):
        n = end - start + 1
        for c_start, c_end in cov:
            lo, hi = max(start, c_start), min(end, c_end)
            if lo <= hi:
                n -= hi - lo + 1
        total += n
    return total


def new_expired_offsets(previous: pd.DataFrame, current: pd.DataFrame) -> pd.DataFrame:
    """Per queue, the EXPIRED offsets of this run that no EXPIRED range of the previous run held (``QUEUE`` +
    ``new_offsets``; queues with none left out). Ranges of one queue and kind do not overlap (spec §5), so
    counting each overlap once is exact."""
    rows = []
    prev = {k: list(zip(g["start_offset"], g["end_offset"])) for k, g in previous.groupby(QUEUE, sort=False)} \
        if len(previous) else {}
    for key, g in (current.groupby(QUEUE, sort=True) if len(current) else []):
        n = _offsets_outside(list(zip(g["start_offset"], g["end_offset"])), prev.get(key, []))
        if n > 0:
            rows.append(dict(zip(QUEUE, key), new_offsets=int(n)))
    return pd.DataFrame(rows, columns=QUEUE + ["new_offsets"])


def failed_expectations(quality: dict[str, Any] | None) -> list[tuple[str, str]]:
    """``(table, expectation)`` of every failed expectation in a ``quality.validate`` result, sorted."""
    out = []
    for table, outcome in (quality or {}).items():
        if not outcome.get("success", True):
            out.extend((table, str(e)) for e in (outcome.get("failed") or ["(suite failed)"]))
    return sorted(out)


@dataclass
class Changes:
    """What changed since the previous run, per group (rows sorted by cluster, group) and for the run."""

    groups: list[dict[str, Any]] = field(default_factory=list)
    failed_expectations: list[tuple[str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.groups or self.failed_expectations)


def changes(previous: dict[str, pd.DataFrame], current: dict[str, pd.DataFrame],
            quality: dict[str, Any] | None = None) -> Changes:
    """Compare two runs' rows: what entered an alert status, what is new in the DLQ and EXPIRED, what failed.

    Args:
        previous, current: ``{"consumer_status": ..., "dlq_candidates": ..., "expired": ...}`` frames of the
            previous run (empty frames when there is none) and of this run.
        quality: this run's gold validation result (``quality.validate``), or None.
    Returns:
        :class:`Changes`; falsy when nothing is worth a message.
    """
    columns = {"consumer_status": STATUS_COLUMNS, "dlq_candidates": DLQ_KEY, "expired": EXPIRED_COLUMNS}
    previous = {k: _typed(previous[k], c) for k, c in columns.items()}
    current = {k: _typed(current[k], c) for k, c in columns.items()}
    by_group: dict[tuple[str, str], dict[str, Any]] = {}

    def g(cluster: str, group: str) -> dict[str, Any]:
        return by_group.setdefault((cluster, group), {"cluster": cluster, "consumer_group": group})

    status_now = {(r["cluster"], r["consumer_group"]): r["status"]
                  for r in group_status(current["consumer_status"]).to_dict("records")}
    for r in groups_entering(previous["consumer_status"], current["consumer_status"]).to_dict("records"):
        g(r["cluster"], r["consumer_group"]).update(status=r["status"], previous_status=r["previous_status"])
    for r in queues_entering(previous["consumer_status"], current["consumer_status"]).to_dict("records"):
        entered = g(r["cluster"], r["consumer_group"]).setdefault("queues_entered", {})
        entered[r["status"]] = entered.get(r["status"], 0) + 1
    for r in new_dlq_rows(previous["dlq_candidates"], current["dlq_candidates"]).to_dict("records"):
        key = "new_" + r["reason"].lower()
        entry = g(r["cluster"], r["consumer_group"])
        entry[key] = entry.get(key, 0) + 1
    for r in new_expired_offsets(previous["expired"], current["expired"]).to_dict("records"):
        entry = g(r["cluster"], r["consumer_group"])
        entry["new_expired_offsets"] = entry.get("new_expired_offsets", 0) + r["new_offsets"]
    groups = []
    for key in sorted(by_group):
        entry = by_group[key]
        entry.setdefault("status", status_now.get(key, "OK"))
        entry.setdefault("previous_status", entry["status"])
        if "queues_entered" in entry:
            entry["queues_entered"] = {s: entry["queues_entered"][s] for s in ALERT_STATUSES
                                       if s in entry["queues_entered"]}
        groups.append(entry)
    return Changes(groups=groups, failed_expectations=failed_expectations(quality))


def _group_line(entry: dict[str, Any]) -> str:
    parts = []
    if entry["status"] != entry["previous_status"]:
        parts.append(f"{entry['status']} (was {entry['previous_status'] or 'not reported'})")
    if entry.get("queues_entered"):
        parts.append("queues entered " + ", ".join(f"{s}: {n}" for s, n in entry["queues_entered"].items()))
    for key, label in (("new_in_dlq", "new IN_DLQ"), ("new_blocking_commit", "new BLOCKING_COMMIT"),
                       ("new_orderly_blocked", "new ORDERLY_BLOCKED"), ("new_expired_offsets", "new EXPIRED offsets")):
        if entry.get(key):
            parts.append(f"{entry[key]} {label}")
    return f"- {entry['consumer_group']} ({entry['cluster']}): " + "; ".join(parts)


def message(found: Changes, *, run_id: str, as_of: dt.datetime | str, previous_run_id: str | None,
            dashboard_url: str) -> dict[str, Any]:
    """The one message of a run: ``subject``, ``text`` (for people) and ``payload`` (the webhook's JSON body).

    The payload carries ``text`` (what Slack, Teams and most chat bots display) and the same facts as fields.
    """
    as_of_text = as_of if isinstance(as_of, str) else reports.format_ts(as_of)
    n = len(found.groups)
    head = f"{n} group{'s' if n != 1 else ''} need{'s' if n == 1 else ''} attention" if n else "no group changed"
    subject = f"[rmq-recon] {run_id}: {head}"
    if found.failed_expectations:
        k = len(found.failed_expectations)
        subject += f", {k} failed expectation{'s' if k != 1 else ''}"
    lines = [f"RocketMQ reconciliation {run_id} (as of {as_of_text}): {head}"]
    lines += [_group_line(e) for e in found.groups]
    if found.failed_expectations:
        lines.append("Failed expectations:")
        lines += [f"- {table}: {expectation}" for table, expectation in found.failed_expectations]
    lines.append(f"Compared with run {previous_run_id}." if previous_run_id else "No earlier run to compare with.")
    lines.append(f"Dashboard: {dashboard_url}")
    text = "\n".join(lines)
    payload = {"text": text, "run_id": run_id, "as_of": as_of_text, "previous_run_id": previous_run_id,
               "dashboard_url": dashboard_url, "groups": found.groups,
               "failed_expectations": [{"table": t, "expectation": e} for t, e in found.failed_expectations]}
    return {"subject": subject, "text": text, "payload": payload}


# --------------------------------------------------------------------------------------------- extract


def extract(lake: str, run: dict[str, Any] | None) -> dict[str, pd.DataFrame]:
    """The rows one run's comparison needs (empty frames for no run): filtered reads of its gold rows."""
    if run is None:
        return {"consumer_status": _typed(pd.DataFrame(), STATUS_COLUMNS),
                "dlq_candidates": _typed(pd.DataFrame(), DLQ_KEY),
                "expired": _typed(pd.DataFrame(), EXPIRED_COLUMNS)}
    return {
        "consumer_status": gold_runs.run_rows(lake, run, consumer_status.TABLE, STATUS_COLUMNS),
        "dlq_candidates": gold_runs.run_rows(lake, run, dlq_candidates.TABLE, DLQ_KEY,
                                             [("reason", "in", list(DLQ_REASONS))]),
        "expired": gold_runs.run_rows(lake, run, unconsumed_ranges.TABLE, EXPIRED_COLUMNS,
                                      [("kind", "=", "EXPIRED")]),
    }


def channels_sent(lake: str, run_id: str) -> set[str]:
    """The channels whose alert for ``run_id`` was delivered (gold/alerts_sent)."""
    from jobs.lake import _delta

    if not _delta.exists(lake, alerts_sent.TABLE):
        return set()
    df = _delta.read_pandas_columns(lake, alerts_sent.TABLE, ["run_id", "channel"],
                                    filters=[("run_id", "=", run_id)])
    return set(df[df["run_id"] == run_id]["channel"])


def dashboard_url(report_dir: str, run_id: str, base_url: str | None = None) -> str:
    """Where people open the dashboard (:mod:`jobs.ops.dashboard`, ``<reports>/dashboard/index.html``, which leads to
    this run's groups and files): under ``base_url`` when the reports root is served over HTTP, else the local or
    ``s3://`` path beside the run's report folder."""
    if base_url:
        return f"{base_url.rstrip('/')}/dashboard/index.html"
    root = report_dir.rstrip("/")
    root = root[: -len(run_id)].rstrip("/") if root.endswith(run_id) else root.rsplit("/", 1)[0]
    return f"{root}/dashboard/index.html"


# ------------------------------------------------------------------------------------------------- run


Sender = Callable[[dict[str, Any]], None]


def run(lake: str, run_id: str, *, senders: dict[str, Sender], quality: dict[str, Any] | None = None,
        dashboard_base_url: str | None = None) -> dict[str, Any]:
    """Send the run's alert on every channel of ``senders`` that has not delivered it yet; record each delivery.

    Args:
        lake: the lake root.
        run_id: a completed reconcile run.
        senders: ``{channel: send(message)}``, e.g. the notifiers of ``jobs.ops.notifiers``; empty: alerts are off.
        quality: the run's gold validation result (``quality.validate_layer``), for failed expectations.
        dashboard_base_url: where the report folders are served (see :func:`dashboard_url`).
    Returns:
        ``{"run_id", "previous_run_id", "changed", "sent": [channels], "skipped": [channels already sent]}``.
    Raises:
        KeyError: ``run_id`` has not completed. A sender's exception propagates after the channels that
        succeeded were recorded (the task's retry sends the failed ones only).
    """
    out: dict[str, Any] = {"run_id": run_id, "previous_run_id": None, "changed": False, "sent": [], "skipped": []}
    if not senders:
        return out
    from jobs.lake import lease

    with lease.hold(lake, "alerts", purpose=f"alerts of {run_id}", say=log.info):
        done = channels_sent(lake, run_id)
        todo = [c for c in senders if c not in done]
        out["skipped"] = sorted(c for c in senders if c in done)
        if not todo:
            log.info("alerts: %s already sent on %s", run_id, ", ".join(out["skipped"]))
            return out
        me = gold_runs.run(lake, run_id)
        prev_id = gold_runs.previous_run_id(gold_runs.completed_runs(lake), run_id)
        out["previous_run_id"] = prev_id
        found = changes(extract(lake, gold_runs.run(lake, prev_id) if prev_id else None), extract(lake, me), quality)
        out["changed"] = bool(found)
        if not found:
            log.info("alerts: nothing new in %s since %s; nothing sent", run_id, prev_id or "(no earlier run)")
            return out
        msg = message(found, run_id=run_id, as_of=_ts(me["as_of"]), previous_run_id=prev_id,
                      dashboard_url=dashboard_url(str(me["report_dir"]), run_id, dashboard_base_url))
        failure: BaseException | None = None
        sent_rows = []
        for channel in todo:
            try:
                senders[channel](msg)
            except Exception as exc:  # the others still go out; the task fails after recording them
                log.error("alerts: %s: not delivered: %s", channel, exc)
                failure = failure or exc
                continue
            sent_rows.append({"run_id": run_id, "channel": channel, "previous_run_id": prev_id,
                              "as_of": _ts(me["as_of"]), "sent_at": dt.datetime.now(UTC).replace(microsecond=0),
                              "message": msg["text"]})
            out["sent"].append(channel)
        if sent_rows:
            load(lake, sent_rows)
        if failure is not None:
            raise failure
    log.info("alerts: %s sent on %s", run_id, ", ".join(out["sent"]))
    return out


def after_run(summary: dict[str, Any] | None, quality: dict[str, Any] | None, *, lake: str,
              webhook_conn_id: str = "rmq_recon_webhook", smtp_conn_id: str = "rmq_recon_smtp",
              dashboard_base_url: str | None = None, context: Any = None) -> dict[str, Any] | None:
    """The DAG's alert task: the run's alert on the channels whose Airflow connections exist (see :func:`run`).

    ``summary`` is the reconcile task's return (None when it failed: nothing to compare, nothing sent), ``quality``
    validate_gold's (None when it failed: validated again without raising, see ``quality.gold_validation``).
    """
    from jobs.ops import notifiers
    from jobs.ops.quality import gold_validation

    if summary is None:
        log.info("alerts: the reconcile did not complete; nothing to compare")
        return None
    senders = notifiers.senders(webhook_conn_id=webhook_conn_id, smtp_conn_id=smtp_conn_id, context=context)
    if not senders:  # each channel said why in one line
        return None
    return run(lake, summary["run_id"], senders=senders, quality=gold_validation(lake, quality, summary["run_id"]),
               dashboard_base_url=dashboard_base_url or None)


def load(lake: str, rows: list[dict[str, Any]]) -> None:
    """Record delivered alerts in gold/alerts_sent (insert-only on (run_id, channel))."""
    from jobs.lake import _delta, _spark

    with _spark.session() as spark:
        frame = spark.createDataFrame([tuple(r.get(c) for c in alerts_sent.TABLE.columns) for r in rows],
                                      alerts_sent.TABLE.schema)
        _delta.merge(spark, frame, lake, alerts_sent.TABLE, insert_only=True)


def _ts(value: Any) -> dt.datetime:
    ts = pd.Timestamp(value)
    ts = ts.tz_localize(UTC) if ts.tzinfo is None else ts.tz_convert(UTC)
    return ts.to_pydatetime()


def to_json(msg: dict[str, Any]) -> bytes:
    """The webhook body of a message."""
    return json.dumps(msg["payload"], sort_keys=True).encode()
