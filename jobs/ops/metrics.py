"""Metrics job: push a reconcile run's figures to a Prometheus Pushgateway, beside rocketmq-exporter's.

Off unless ``RMQ_RECON_PUSHGATEWAY_URL`` (or the DAG Param ``pushgateway_url``) names a Pushgateway. Reads this run's
rows of gold/consumer_status, duplicated_ranges, unconsumed_ranges and dlq_candidates (filtered reads,
``jobs.reconcile.gold_runs``) and the run's gold validation result; writes nothing to the lake.

Names and labels follow rocketmq-exporter (``rocketmq_group_diff``, ``rocketmq_group_get_latency`` with labels
``cluster``, ``broker``, ``topic``, ``group``, ``queueid``) under the prefix ``rocketmq_recon_`` so that nothing
collides and one Grafana board can join both on those labels. A broadcast group's queue is per client
(``clientid``, empty for clustering groups). Per queue:

* ``rocketmq_recon_lag``, ``rocketmq_recon_consumable_lag`` (messages), ``rocketmq_recon_time_lag_seconds``;
* ``rocketmq_recon_status{status}``: 1 for the queue's status, 0 for the others (a state set: UNKNOWN, OK, WARN,
  STALL, REWIND; UNKNOWN when the newest snapshot gave no bounds, its lag series then absent);
* ``rocketmq_recon_duplicated_messages``, ``rocketmq_recon_unconsumed_messages{kind}``,
  ``rocketmq_recon_expired_messages`` (= kind EXPIRED), ``rocketmq_recon_dlq_candidates{reason}``.

Per group (``cluster``, ``group``) the same names with ``_group`` after the prefix (``rocketmq_recon_group_lag``...):
sums, the largest time lag, the worst status. Per run: ``rocketmq_recon_quality_pass{table}`` (1 when the table's
expectation suite passed), ``rocketmq_recon_run_as_of_timestamp_seconds`` and ``rocketmq_recon_run_info{run_id}``.

Pushed per cluster, grouping key ``{job="rmq_recon", cluster=...}``, with PUT: a run replaces every series its
cluster's group held, so a re-run (or the next run) leaves no stale series.
"""
from __future__ import annotations

import logging
import os
from typing import Any

import pandas as pd

from jobs.reconcile import verdict
from jobs.reconcile import gold_runs
from schemas import consumer_status, dlq_candidates, duplicated_ranges, unconsumed_ranges

log = logging.getLogger(__name__)

URL_ENV = "RMQ_RECON_PUSHGATEWAY_URL"
JOB = "rmq_recon"
PREFIX = "rocketmq_recon_"
QUEUE = ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id"]
# Our column -> rocketmq-exporter's label name.
QUEUE_LABELS = {"cluster": "cluster", "broker": "broker", "topic": "topic", "consumer_group": "group",
                "queue_id": "queueid", "client_id": "clientid"}
GROUP_LABELS = {"cluster": "cluster", "consumer_group": "group"}
# the verdict's list: UNKNOWN (no bounds at the newest snapshot, spec §4.2) ranks lowest, so a group is UNKNOWN only
# when every queue of it is
STATUSES = verdict.STATUSES
STATUS_RANK = verdict.STATUS_RANK
UNCONSUMED_KINDS = verdict.UNCONSUMED_KINDS
DLQ_REASONS = ("IN_DLQ", "RETRYING", "BLOCKING_COMMIT", "BROADCAST_DROPPED", "ORDERLY_BLOCKED")
# TRANSACTION_DISCARDED rows have no group and no queue offset: counted in summary.json, not a per-queue series
HELP = {
    "lag": "Max - committed offset at the run's latest snapshot (spec 4), per queue: rocketmq_group_diff per queue",
    "consumable_lag": "Max - max(committed, Min): the backlog still in the commitlog",
    "time_lag_seconds": "latest snapshot time - store time of the message at the committed offset",
    "status": "Burrow-style status (1 for the current one): OK, WARN, STALL or REWIND; UNKNOWN without bounds",
    "duplicated_messages": "offsets delivered twice (gold/duplicated_ranges), each once whatever its evidence",
    "unconsumed_messages": "offsets never consumed, by kind (gold/unconsumed_ranges)",
    "expired_messages": "offsets deleted by retention before the group consumed them (kind EXPIRED)",
    "dlq_candidates": "messages that need a human, by reason (gold/dlq_candidates)",
    "consume_mode": "1 for the queue's consume mode (spec 4.1): CONCURRENT, ORDERLY or BROADCAST",
}

Sample = tuple[str, tuple[tuple[str, str], ...], float]


def _labels(row: dict[str, Any], names: dict[str, str], **extra: str) -> tuple[tuple[str, str], ...]:
    out = {label: "" if row[col] is None else str(row[col]) for col, label in names.items()}
    out.update(extra)
    return tuple(sorted(out.items()))


# ------------------------------------------------------------------------------------------- transform


def queue_figures(status: pd.DataFrame, duplicated: pd.DataFrame, unconsumed: pd.DataFrame,
                  dlq: pd.DataFrame) -> pd.DataFrame:
    """One row per queue of the run: lags, status and the counts (0 where a table has nothing for the queue).

    Args:
        status: consumer_status rows (``QUEUE`` + lag, consumable_lag, time_lag_s, status).
        duplicated: range rows (``QUEUE`` + start_offset, end_offset).
        unconsumed: range rows (``QUEUE`` + kind, messages).
        dlq: dlq_candidates rows (``QUEUE`` + reason).
    """
    def norm(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        df["client_id"] = df["client_id"].fillna("").astype(object)
        df["queue_id"] = df["queue_id"].astype("int64")
        return df

    dlq = dlq[dlq["reason"].isin(DLQ_REASONS)] if len(dlq) else dlq  # a group's rows (not a discarded transaction)
    status, duplicated, unconsumed, dlq = norm(status), norm(duplicated), norm(unconsumed), norm(dlq)
    keys = pd.concat([t[QUEUE] for t in (status, duplicated, unconsumed, dlq)]).drop_duplicates()
    status = status.reindex(columns=[*QUEUE, "lag", "consumable_lag", "time_lag_s", "status", "consume_mode"])
    out = keys.merge(status, on=QUEUE, how="left")
    # each offset once, whatever its evidence (jobs.reconcile.verdict: the number every other output shows)
    dup = verdict.union_ranges(duplicated, QUEUE) if len(duplicated) else pd.DataFrame(columns=[*QUEUE, "messages"])
    out["duplicated_messages"] = pd.to_numeric(out[QUEUE].merge(
        dup.groupby(QUEUE, as_index=False)["messages"].sum(), on=QUEUE, how="left")["messages"],
        errors="coerce").fillna(0).values
    for kind in UNCONSUMED_KINDS:
        part = unconsumed[unconsumed["kind"] == kind].groupby(QUEUE, as_index=False)["messages"].sum()
        out[f"unconsumed_{kind}"] = out[QUEUE].merge(part, on=QUEUE, how="left")["messages"].fillna(0).values
    for reason in DLQ_REASONS:
        part = dlq[dlq["reason"] == reason].groupby(QUEUE, as_index=False).size()
        out[f"dlq_{reason}"] = out[QUEUE].merge(part, on=QUEUE, how="left")["size"].fillna(0).values
    return out.sort_values(QUEUE, kind="mergesort").reset_index(drop=True)


def _figure_samples(rows: list[dict[str, Any]], names: dict[str, str], prefix: str) -> list[Sample]:
    out: list[Sample] = []
    for r in rows:
        base = _labels(r, names)
        for col, metric in (("lag", "lag"), ("consumable_lag", "consumable_lag"), ("time_lag_s", "time_lag_seconds")):
            if not pd.isna(r[col]):
                out.append((prefix + metric, base, float(r[col])))
        if isinstance(r["status"], str):
            out += [(prefix + "status", _labels(r, names, status=s), float(r["status"] == s)) for s in STATUSES]
        if isinstance(r.get("consume_mode"), str):  # queues only: a group's topics can differ
            out.append((prefix + "consume_mode", _labels(r, names, mode=r["consume_mode"]), 1.0))
        out.append((prefix + "duplicated_messages", base, float(r["duplicated_messages"])))
        out += [(prefix + "unconsumed_messages", _labels(r, names, kind=k), float(r[f"unconsumed_{k}"]))
                for k in UNCONSUMED_KINDS]
        out.append((prefix + "expired_messages", base, float(r["unconsumed_EXPIRED"])))
        out += [(prefix + "dlq_candidates", _labels(r, names, reason=k), float(r[f"dlq_{k}"])) for k in DLQ_REASONS]
    return out


def group_figures(queues: pd.DataFrame) -> pd.DataFrame:
    """Per group: summed lags and counts, the largest time lag and the worst status (spec 4)."""
    counts = ["duplicated_messages"] + [f"unconsumed_{k}" for k in UNCONSUMED_KINDS] + [f"dlq_{r}" for r in DLQ_REASONS]
    groups = queues.groupby(["cluster", "consumer_group"], sort=True)
    out = groups[["lag", "consumable_lag"] + counts].sum(min_count=1)
    out["time_lag_s"] = groups["time_lag_s"].max()
    out["status"] = groups["status"].agg(
        lambda s: max(s.dropna(), key=lambda v: STATUS_RANK.get(v, 0)) if s.notna().any() else None)
    out[counts] = out[counts].fillna(0)
    return out.reset_index()


def samples(queues: pd.DataFrame, quality: dict[str, Any] | None, *, run_id: str, as_of_s: float) -> list[Sample]:
    """Every sample of one cluster's push, ``(name, sorted labels, value)``, sorted: the pure core, exact-tested."""
    out = _figure_samples(queues.to_dict("records"), QUEUE_LABELS, PREFIX)
    out += _figure_samples(group_figures(queues).to_dict("records"), GROUP_LABELS, PREFIX + "group_")
    for table, outcome in sorted((quality or {}).items()):
        out.append((PREFIX + "quality_pass", (("table", table),), float(bool(outcome.get("success")))))
    out.append((PREFIX + "run_as_of_timestamp_seconds", (), float(as_of_s)))
    out.append((PREFIX + "run_info", (("run_id", run_id),), 1.0))
    return sorted(out)


# --------------------------------------------------------------------------------------------- extract


def extract(lake: str, run: dict[str, Any]) -> pd.DataFrame:
    """This run's per-queue figures (filtered reads of its gold rows)."""
    return queue_figures(
        gold_runs.run_rows(lake, run, consumer_status.TABLE,
                           QUEUE + ["lag", "consumable_lag", "time_lag_s", "status", "consume_mode"]),
        gold_runs.run_rows(lake, run, duplicated_ranges.TABLE, QUEUE + ["start_offset", "end_offset"]),
        gold_runs.run_rows(lake, run, unconsumed_ranges.TABLE, QUEUE + ["kind", "messages"]),
        gold_runs.run_rows(lake, run, dlq_candidates.TABLE, QUEUE + ["reason"]),
    )


# ------------------------------------------------------------------------------------------------ load


def registry(cluster_samples: list[Sample]) -> Any:
    """A prometheus-client registry holding ``cluster_samples`` as gauges (one family per name)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily

    families: dict[str, Any] = {}
    for name, labels, value in cluster_samples:
        short = name.removeprefix(PREFIX).removeprefix("group_")
        if name not in families:
            families[name] = GaugeMetricFamily(name, HELP.get(short, name.removeprefix(PREFIX).replace("_", " ")),
                                               labels=[k for k, _ in labels])
        families[name].add_metric([v for _, v in labels], value)

    class _Run:
        def collect(self) -> list[Any]:
            return list(families.values())

    reg = CollectorRegistry()
    reg.register(_Run())
    return reg


def push(url: str, cluster: str, cluster_samples: list[Sample], *, timeout_s: float = 30) -> None:
    """PUT one cluster's samples to the Pushgateway group ``{job="rmq_recon", cluster=...}`` (replacing it)."""
    from prometheus_client import push_to_gateway

    push_to_gateway(url, job=JOB, grouping_key={"cluster": cluster}, registry=registry(cluster_samples),
                    timeout=timeout_s)


# ------------------------------------------------------------------------------------------------- run


def _shown(url: str) -> str:
    """The URL as logs show it: without user and password."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else ""))) \
        if parts.hostname else url


def pushgateway_url(value: str | None = None) -> str:
    """The Pushgateway URL: the value given (a DAG Param), else ``RMQ_RECON_PUSHGATEWAY_URL``; empty means off."""
    return (value if value is not None else os.environ.get(URL_ENV, "")).strip()


def after_run(summary: dict[str, Any] | None, quality: dict[str, Any] | None, *, lake: str,
              url: str | None = None) -> dict[str, Any] | None:
    """The DAG's metrics task: push the run's figures (None when the reconcile failed or no URL is set)."""
    if not pushgateway_url(url):
        log.info("metrics: off (set %s or the pushgateway_url Param to push to a Prometheus Pushgateway)", URL_ENV)
        return None
    if summary is None:
        log.info("metrics: the reconcile did not complete; nothing to push")
        return None
    from jobs.ops.quality import gold_validation

    return run(lake, summary["run_id"], url=url, quality=gold_validation(lake, quality, summary["run_id"]))


def run(lake: str, run_id: str, *, url: str | None = None, quality: dict[str, Any] | None = None) -> dict[str, Any]:
    """Push the figures of the completed run ``run_id``, one Pushgateway group per cluster.

    Args:
        lake: the lake root.
        run_id: a completed reconcile run.
        url: the Pushgateway (``http://host:9091``); default ``RMQ_RECON_PUSHGATEWAY_URL``; empty: off.
        quality: the run's gold validation result (``quality.validate_layer``); none: no quality samples.
    Returns:
        ``{"pushed": {cluster: samples}}`` (empty when off). Idempotent: a re-run replaces the same groups.
    """
    target = pushgateway_url(url)
    if not target:
        log.info("metrics: off (set %s or the pushgateway_url Param to push to a Prometheus Pushgateway)", URL_ENV)
        return {"pushed": {}}
    me = gold_runs.run(lake, run_id)
    queues = extract(lake, me)
    as_of_s = pd.Timestamp(me["as_of"]).timestamp()
    pushed = {}
    for cluster in sorted(queues["cluster"].unique()):
        cluster_samples = samples(queues[queues["cluster"] == cluster], quality, run_id=run_id, as_of_s=as_of_s)
        try:
            push(target, cluster, cluster_samples)
        except OSError as exc:
            raise OSError(f"metrics: Pushgateway {_shown(target)} did not take cluster {cluster}'s "
                          f"{len(cluster_samples)} samples ({exc}); check {URL_ENV}") from None
        pushed[cluster] = len(cluster_samples)
    log.info("metrics: pushed %s to %s", ", ".join(f"{c} ({n} samples)" for c, n in pushed.items()) or "nothing",
             _shown(target))
    return {"pushed": pushed}
