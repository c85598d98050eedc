"""gold/consumer_status: a Burrow-style status per (G, q) at the latest snapshot (spec §4, formats §9).

Burrow's evaluator (``core/internal/evaluator/caching.go``) adapted to snapshots: the inputs are the
committed offsets and lags of the last ``window`` snapshots of a key (the ones with known bounds), and the
rules below are applied in this order, first match wins:

0. fewer than 2 snapshots -> ``OK`` (nothing to compare; Burrow's ``minimum-complete``);
1. :func:`is_lag_zero` -> ``OK``: a caught-up consumer is fine whatever happened before;
2. :func:`has_rewound` -> ``REWIND``: checked before stall/warn because a rewound consumer also shows lag
   that does not shrink, and the rewind is the cause an operator needs to see;
3. :func:`is_stalled` -> ``STALL``, else :func:`is_lag_never_decreasing` -> ``WARN``;
4. otherwise ``OK``.

A key whose newest snapshot gives no bounds (spec §4.2 NO_CONSUME_QUEUE) is ``UNKNOWN`` at that snapshot.

Each rule is a plain function of Python lists (oldest first), tested on lists; the Spark transform applies
the very same functions per key with ``applyInPandas`` over the window's rows, so each rule has one definition.
"""
from __future__ import annotations

from typing import Sequence

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.rules.snapshots import QUEUE, SERIES_KEY, known, latest, message_at, newest
from schemas import consumer_status as schema

COLUMNS = schema.REPORT_COLUMNS
STATUSES = ("OK", "WARN", "STALL", "REWIND")


def has_enough_snapshots(offsets: Sequence[int]) -> bool:
    """Rule 0 - at least 2 snapshots in the window, else there is no trend to judge."""
    return len(offsets) >= 2


def is_lag_zero(lags: Sequence[int]) -> bool:
    """Rule 1 - the lag (Max - C) at the latest snapshot is 0: the consumer has caught up."""
    return len(lags) > 0 and lags[-1] == 0


def has_rewound(offsets: Sequence[int]) -> bool:
    """Rule 2 - some C_{s+1} < C_s and the latest C is still below the largest C before that drop
    (Burrow ``checkIfOffsetsRewind``; in RocketMQ a reset or an OFFSET_ILLEGAL correction)."""
    for i in range(len(offsets) - 1):
        if offsets[i + 1] < offsets[i] and offsets[-1] < max(offsets[: i + 1]):
            return True
    return False


def is_lag_always_positive(lags: Sequence[int]) -> bool:
    """Rule 3 precondition - the lag is above 0 in every snapshot of the window (Burrow ``isLagAlwaysNotZero``)."""
    return len(lags) > 0 and all(lag > 0 for lag in lags)


def is_stalled(offsets: Sequence[int], lags: Sequence[int]) -> bool:
    """Rule 3a - lag in every snapshot and the committed offset never moved (Burrow ``checkIfOffsetsStalled``;
    in RocketMQ one hung message pins ``ProcessQueue.removeMessage``)."""
    return is_lag_always_positive(lags) and len(set(offsets)) == 1


def is_lag_never_decreasing(lags: Sequence[int]) -> bool:
    """Rule 3b - lag in every snapshot and it never went down from one snapshot to the next
    (Burrow ``checkIfLagNotDecreasing``: the consumer is falling behind)."""
    return is_lag_always_positive(lags) and all(b >= a for a, b in zip(lags, lags[1:]))


def partition_status(offsets: Sequence[int], lags: Sequence[int]) -> str:
    """The status of one (G, q) from its window (oldest first), rules applied in the documented order."""
    if not has_enough_snapshots(offsets):
        return "OK"
    if is_lag_zero(lags):
        return "OK"
    if has_rewound(offsets):
        return "REWIND"
    if is_stalled(offsets, lags):
        return "STALL"
    if is_lag_never_decreasing(lags):
        return "WARN"
    return "OK"


_STATUS_SCHEMA = ", ".join(
    f"{k} {t}" for k, t in zip(SERIES_KEY, ["string", "string", "string", "string", "string", "int"])
) + ", status string"

# Keys per applyInPandas call: one call per key cost ~3 ms each on Sail (3,192 keys: 12 s of a 10 M run), so the
# keys are spread over a fixed number of hash buckets and each call judges the keys of its bucket one by one.
_BUCKETS = 32


def _status_of_keys(pdf: pd.DataFrame) -> pd.DataFrame:
    """applyInPandas body: the window rows of some keys -> one row per key with :func:`partition_status`."""
    pdf = pdf.drop(columns="_bucket").sort_values([*SERIES_KEY, "snapshot_ts"], kind="mergesort")
    keys = pdf[SERIES_KEY].to_numpy(dtype=object)
    offsets = pdf["committed_offset"].to_numpy(dtype="int64").tolist()
    lags = pdf["lag"].to_numpy(dtype="int64").tolist()
    starts = [0] + [i for i in range(1, len(keys)) if (keys[i] != keys[i - 1]).any()] + [len(keys)]
    rows = [(*keys[a], partition_status(offsets[a:b], lags[a:b])) for a, b in zip(starts, starts[1:])]
    return pd.DataFrame(rows, columns=[*SERIES_KEY, "status"])


def window_status(series: DataFrame, *, window: int = 10) -> DataFrame:
    """(``SERIES_KEY``, status) over each key's last ``window`` snapshots with known bounds."""
    rows = known(series).where(F.col("snapshots_after") < F.lit(window)).select(
        *SERIES_KEY, "snapshot_ts", "committed_offset", (F.col("max_offset") - F.col("committed_offset")).alias("lag"))
    bucket = F.pmod(F.xxhash64(*SERIES_KEY), F.lit(_BUCKETS)).alias("_bucket")
    return rows.select(bucket, *rows.columns).groupBy("_bucket").applyInPandas(_status_of_keys, _STATUS_SCHEMA)


def consumer_status(series: DataFrame, messages: DataFrame, *, window: int = 10, modes: DataFrame | None = None,
                    unknown: DataFrame | None = None) -> DataFrame:
    """The gold/consumer_status rows (without run_id): lags at S and the Burrow-style status.

    Args:
        series: :func:`jobs.rules.snapshots.offset_series`.
        messages: silver/messages (the store time of the message at ``C_S`` gives the time lag).
        window: how many of the latest snapshots the status looks at (Burrow's intervals, default 10).
        modes: (cluster, consumer_group, topic, consume_mode) of the orderly and broadcast pairs
            (:func:`jobs.rules.modes.mode_rows`); every other pair is ``CONCURRENT``. ``inflight`` is 0 until the
            POP rules (issue 36).
        unknown: the keys whose newest snapshot has no bounds (:func:`jobs.rules.snapshots.unknown_newest`), when
            the caller has them already.

    Returns:
        ``schemas.consumer_status.REPORT_COLUMNS``; lag = Max - C, consumable lag = Max - max(C, Min) (both
        negative when C > Max), time_lag_s = whole seconds from the store time of the message at C to t_S
        (0 when C >= Max or the message is unknown).
    """
    at = message_at(messages).select(*QUEUE, F.col("queue_offset").alias("committed_offset"), "store_ts")
    s = latest(series).join(at, on=[*QUEUE, "committed_offset"], how="left")
    c, lo, hi = F.col("committed_offset"), F.col("min_offset"), F.col("max_offset")
    age_ms = F.unix_millis("snapshot_ts") - F.unix_millis("store_ts")
    time_lag = F.when((c < hi) & F.col("store_ts").isNotNull(), F.floor(age_ms / F.lit(1000))).otherwise(F.lit(0))
    out = s.select(*SERIES_KEY, "snapshot_ts", "committed_offset", "min_offset", "max_offset",
                   (hi - c).alias("lag"), (hi - F.greatest(c, lo)).alias("consumable_lag"),
                   time_lag.alias("time_lag_s")).join(window_status(series, window=window), on=SERIES_KEY, how="left")
    # spec §4.2: a key whose newest snapshot gives no bounds is UNKNOWN at it, Min, Max and the lags null (its
    # latest snapshot with bounds would judge the consumer by a stale offset)
    if unknown is None:
        unknown = newest(series).where(~F.col("bounds_known"))
    nulls = [F.lit(None).cast("long").alias(c) for c in ("min_offset", "max_offset", "lag", "consumable_lag",
                                                         "time_lag_s")]
    out = out.join(unknown.select(*SERIES_KEY), on=SERIES_KEY, how="left_anti").unionByName(
        unknown.select(*SERIES_KEY, "snapshot_ts", "committed_offset", *nulls, F.lit("UNKNOWN").alias("status")))
    if modes is not None:
        out = out.join(modes.withColumnRenamed("consume_mode", "_mode"), on=["cluster", "consumer_group", "topic"],
                       how="left")
    else:
        out = out.withColumn("_mode", F.lit(None).cast("string"))
    out = out.withColumn("consume_mode", F.coalesce(F.col("_mode"), F.lit("CONCURRENT"))).withColumn(
        "inflight", F.lit(0))
    types = {f.name: f.dataType for f in schema.SCHEMA.fields}
    return out.select(*[F.col(k).cast(types[k]).alias(k) for k in COLUMNS])


TIMELINE_SNAPSHOTS = 48


def status_samples(series: DataFrame, *, window: int = 10, keep: int | None = None) -> DataFrame:
    """The gold/status_samples rows (without run_id): each key's last ``max(window, keep)`` known snapshots.

    Why: a person checking a status needs the very samples the rules judged (``in_window``), and the dashboard's
    timeline a few more before them; bounded per key, so the table never grows with the messages.
    """
    from schemas import status_samples as samples_schema

    last = max(window, TIMELINE_SNAPSHOTS if keep is None else keep)
    rows = known(series).where(F.col("snapshots_after") < F.lit(last)).select(
        *SERIES_KEY, "snapshot_ts", "committed_offset", "min_offset", "max_offset",
        (F.col("max_offset") - F.col("committed_offset")).alias("lag"),
        (F.col("snapshots_after") < F.lit(window)).alias("in_window"))
    types = {f.name: f.dataType for f in samples_schema.SCHEMA.fields}
    return rows.select(*[F.col(k).cast(types[k]).alias(k) for k in samples_schema.COLUMNS])
