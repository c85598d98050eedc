"""One vocabulary for every output: a group's severity (CRITICAL / WARNING / OK) and its reason, the Burrow-style
status beside it, and counts in which an offset counts once.

The terminal, ``summary.json``, a run's ``index.html``, the dashboard and the metrics all take their numbers from
here, so they cannot disagree (an offset with both TRACE and REWIND evidence was 2 in summary.json and 1 on the
dashboard; a group with 2,390 EXPIRED messages was "OK" in the terminal and CRITICAL on the dashboard). Pure pandas on
one run's report rows (small frames).
"""
from __future__ import annotations

from typing import Any, Iterable

import pandas as pd

SERIES_KEY = ["cluster", "consumer_group", "client_id", "topic", "broker", "queue_id"]
GROUP = ["cluster", "consumer_group"]
# UNKNOWN (spec §4.2: no bounds at the newest snapshot) ranks lowest: a group is UNKNOWN only when all its queues are
STATUSES = ("UNKNOWN", "OK", "WARN", "STALL", "REWIND")
STATUS_RANK = {s: i for i, s in enumerate(STATUSES)}
SEVERITIES = ("OK", "WARNING", "CRITICAL")
# messages the group will never consume: POP_LOST too (a pop the broker could not revive, spec §4.1)
LOST_KINDS = ("EXPIRED", "SKIPPED", "BROADCAST_DROPPED", "POP_LOST")
UNCONSUMED_KINDS = ("BACKLOG", *LOST_KINDS)
DLQ_REASONS = ("IN_DLQ", "BLOCKING_COMMIT", "RETRYING", "BROADCAST_DROPPED", "ORDERLY_BLOCKED", "TRANSACTION_DISCARDED")
# a DLQ candidate's reason BROADCAST_DROPPED is not the unconsumed kind of the same name: its own column
DLQ_COLUMNS = ("IN_DLQ", "BLOCKING_COMMIT", "RETRYING", "DLQ_BROADCAST_DROPPED", "ORDERLY_BLOCKED",
               "TRANSACTION_DISCARDED")
# the candidates a person handles as messages (a broadcast drop counts as lost: broadcast mode has no retry); an
# orderly queue's blocked head and a discarded transaction are among them
DLQ_BOUND = ("IN_DLQ", "BLOCKING_COMMIT", "RETRYING", "ORDERLY_BLOCKED", "TRANSACTION_DISCARDED")


def union_ranges(ranges: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The union of ``[start_offset, end_offset]`` per key: overlapping or adjacent ranges merge, so an offset
    counts once (a duplicated offset with both TRACE and REWIND evidence is one offset).

    Returns:
        ``keys`` + start_offset, end_offset, messages; sorted by key and start.
    """
    cols = [*keys, "start_offset", "end_offset", "messages"]
    if not len(ranges):
        return pd.DataFrame(columns=cols)
    r = ranges[[*keys, "start_offset", "end_offset"]].astype({"start_offset": "int64", "end_offset": "int64"})
    r = r.sort_values([*keys, "start_offset", "end_offset"], kind="mergesort").reset_index(drop=True)
    prev_end = r.groupby(keys, sort=False, dropna=False)["end_offset"].transform(lambda s: s.cummax().shift())
    new = prev_end.isna() | (r["start_offset"] > prev_end + 1)
    r["_island"] = new.cumsum()
    out = (r.groupby([*keys, "_island"], sort=False, dropna=False)
           .agg(start_offset=("start_offset", "min"), end_offset=("end_offset", "max")).reset_index()
           .drop(columns="_island"))
    out["messages"] = out["end_offset"] - out["start_offset"] + 1
    return out[cols].reset_index(drop=True)


def distinct_offsets(ranges: pd.DataFrame, keys: list[str] | None = None) -> int:
    """How many distinct (group, client, queue, offset) the ranges name (each offset once, whatever its evidence)."""
    return int(union_ranges(ranges, keys or SERIES_KEY)["messages"].sum()) if len(ranges) else 0


def offsets_by(ranges: pd.DataFrame, column: str) -> dict[str, int]:
    """Distinct offsets per value of ``column`` (evidence or kind): a breakdown, whose parts may overlap."""
    if not len(ranges):
        return {}
    return {str(v): distinct_offsets(part) for v, part in sorted(ranges.groupby(column), key=lambda kv: str(kv[0]))}


def worst_status(statuses: Iterable[str]) -> str:
    """The most severe status of a group's queues (REWIND > STALL > WARN > OK > UNKNOWN)."""
    found = [s for s in statuses if s in STATUS_RANK]
    return max(found, key=STATUS_RANK.__getitem__) if found else "OK"


def has_lost_messages(row: dict[str, Any]) -> bool:
    """Messages the group will never consume: EXPIRED, SKIPPED, BROADCAST_DROPPED or POP_LOST offsets."""
    return sum(int(row[k]) for k in LOST_KINDS) > 0


def needs_a_human(row: dict[str, Any]) -> bool:
    """A message in the DLQ or blocking the commit or an orderly queue, an offset to correct, or a rewound or
    stalled queue."""
    return (int(row["IN_DLQ"]) + int(row["BLOCKING_COMMIT"]) + int(row.get("ORDERLY_BLOCKED", 0))
            + int(row.get("TRANSACTION_DISCARDED", 0)) + int(row["corrections"]) > 0
            or row["status"] in ("REWIND", "STALL"))


def has_duplicates_or_warnings(row: dict[str, Any]) -> bool:
    """Duplicated offsets, messages retrying, or a queue whose lag never shrinks."""
    return int(row["duplicated"]) + int(row["RETRYING"]) > 0 or row["status"] == "WARN"


def severity(row: dict[str, Any]) -> str:
    """CRITICAL when messages are lost or need a human, WARNING on duplicates or warnings, else OK.

    Losses and duplicates count as much as lag: a group with 2,390 EXPIRED messages is CRITICAL even when every
    queue's status is OK.
    """
    if has_lost_messages(row) or needs_a_human(row):
        return "CRITICAL"
    if has_duplicates_or_warnings(row):
        return "WARNING"
    return "OK"


def why(row: dict[str, Any]) -> str:
    """The facts behind a group's severity, most severe first (``"2390 EXPIRED; 1200 duplicated"``)."""
    parts = [f"{int(row[k])} {k}" for k in LOST_KINDS if int(row[k])]
    parts += [f"{int(row[k])} {k}" for k in ("IN_DLQ", "BLOCKING_COMMIT", "ORDERLY_BLOCKED", "TRANSACTION_DISCARDED")
              if int(row.get(k, 0))]
    if int(row["corrections"]):
        parts.append(f"{int(row['corrections'])} offsets to correct")
    if row["status"] != "OK":
        parts.append(f"status {row['status']}")
    if int(row["duplicated"]):
        parts.append(f"{int(row['duplicated'])} duplicated")
    if int(row["RETRYING"]):
        parts.append(f"{int(row['RETRYING'])} RETRYING")
    return "; ".join(parts)


def as_counts(values: pd.Series) -> pd.Series:
    """Counts as int64, missing ones 0."""
    return pd.to_numeric(values, errors="coerce").fillna(0).astype("int64")


def count_by(df: pd.DataFrame, keys: list[str], column: str, values: Iterable[str],
             weight: str | None = None, names: Iterable[str] | None = None) -> pd.DataFrame:
    """One column per value of ``column`` (named ``names``, default the values): rows (or sum of ``weight``) per key."""
    values = list(values)
    names = list(names) if names is not None else values
    if not len(df):
        return pd.DataFrame(columns=[*keys, *names])
    w = df[weight] if weight else pd.Series(1, index=df.index)
    t = df.assign(_w=w.astype("int64")).pivot_table(index=keys, columns=column, values="_w", aggfunc="sum",
                                                    fill_value=0)
    t = t.reindex(columns=values, fill_value=0)
    t.columns = names
    return t.reset_index()


OVERVIEW_COLUMNS = ["cluster", "consumer_group", "severity", "status", "queues", "duplicated", "unconsumed", "lost",
                    *UNCONSUMED_KINDS, "dlq", *DLQ_COLUMNS, "corrections", "why"]


def group_overview(consumer_status: pd.DataFrame, duplicated_ranges: pd.DataFrame,
                   unconsumed_ranges: pd.DataFrame, dlq_candidates: pd.DataFrame,
                   offset_corrections: pd.DataFrame) -> pd.DataFrame:
    """One row per group of the run, ranked most severe first.

    ``duplicated`` counts offsets once (the union of the TRACE and REWIND ranges of each queue and client);
    ``unconsumed`` every unconsumed offset once (per kind beside it, BACKLOG included), ``lost`` those that will
    never be consumed; ``dlq`` the messages in, or on their way to, the DLQ (a broadcast drop never reaches one: it
    is lost, and in ``DLQ_BROADCAST_DROPPED`` only as the candidate row it also is). Ranking: severity, then lost,
    duplicated and DLQ messages, the worst status, then the name.
    """
    present = [df[GROUP] for df in (consumer_status, duplicated_ranges, unconsumed_ranges, dlq_candidates,
                                    offset_corrections) if len(df)]
    out = pd.concat(present, ignore_index=True).drop_duplicates() if present else pd.DataFrame(columns=GROUP)
    if len(consumer_status):
        st = consumer_status.groupby(GROUP).agg(status=("status", worst_status), queues=("status", "size")).reset_index()
        out = out.merge(st, on=GROUP, how="left")
    else:
        out["status"], out["queues"] = "OK", 0
    for name, ranges in (("duplicated", duplicated_ranges), ("unconsumed", unconsumed_ranges),
                         ("lost", unconsumed_ranges[unconsumed_ranges["kind"].isin(LOST_KINDS)]
                          if len(unconsumed_ranges) else unconsumed_ranges)):
        u = union_ranges(ranges, SERIES_KEY)
        u = u.groupby(GROUP)["messages"].sum().rename(name).reset_index() if len(u) else \
            pd.DataFrame(columns=[*GROUP, name])
        out = out.merge(u, on=GROUP, how="left")
    out = out.merge(count_by(unconsumed_ranges, GROUP, "kind", UNCONSUMED_KINDS, "messages"), on=GROUP, how="left")
    out = out.merge(count_by(dlq_candidates, GROUP, "reason", DLQ_REASONS, names=DLQ_COLUMNS), on=GROUP, how="left")
    corr = offset_corrections.groupby(GROUP).size().rename("corrections").reset_index() if len(offset_corrections) \
        else pd.DataFrame(columns=[*GROUP, "corrections"])
    out = out.merge(corr, on=GROUP, how="left")
    for c in ["queues", "duplicated", "unconsumed", "lost", *UNCONSUMED_KINDS, *DLQ_COLUMNS, "corrections"]:
        out[c] = as_counts(out[c])
    out["status"] = out["status"].fillna("OK")
    out["dlq"] = out[list(DLQ_BOUND)].sum(axis=1).astype("int64")
    records = out.to_dict("records")
    out["severity"] = [severity(r) for r in records]
    out["why"] = [why(r) for r in records]
    out["_sev"] = out["severity"].map(SEVERITIES.index)
    out["_st"] = out["status"].map(STATUS_RANK)
    out = out.sort_values(["_sev", "lost", "duplicated", "dlq", "_st", "cluster", "consumer_group"],
                          ascending=[False, False, False, False, False, True, True], kind="mergesort")
    return out[OVERVIEW_COLUMNS].reset_index(drop=True)
