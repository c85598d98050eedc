"""The report folder of spec §5: CSV files, summary.json, the operator script, corrected offset files, index.html.

Everything here works on small pandas frames (the gold rows of one run) and writes through
:mod:`jobs.lake.storage`, so a report folder can live on local disk or S3.
"""
from __future__ import annotations

import datetime as dt
import html
import json
import math
import re
import urllib.parse
from typing import Any, Iterable

import pandas as pd

from jobs.formats import names
from jobs.lake import failpoints, storage

UTC = dt.timezone.utc


def format_ts(value: Any) -> str:
    """ISO-8601 UTC with milliseconds, ``2026-01-02T03:04:05.678Z``; empty for null."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NaT:
        return ""
    ts = pd.Timestamp(value)
    if pd.isna(ts):
        return ""
    ts = ts.tz_localize(UTC) if ts.tzinfo is None else ts.tz_convert(UTC)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (pd.Timestamp, dt.datetime)):
        return format_ts(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return str(int(value)) if value.is_integer() else repr(value)
    try:
        if pd.isna(value):
            return ""
    except (TypeError, ValueError):
        pass
    return str(value)


# A text cell starting with one of these is a formula to a spreadsheet (OWASP, CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_QUOTED = re.compile(r'[,"\r\n]')


def _csv_cell(value: Any) -> str:
    text = _cell(value)
    return "'" + text if isinstance(value, str) and text.startswith(FORMULA_STARTS) else text


def _csv_line(cells: list[str]) -> str:
    r"""One record, quoted as the csv module's QUOTE_MINIMAL does, and a cell holding a carriage return too: with
    ``\n`` line ends the csv module leaves it bare, and readers and spreadsheets start a new row there (where a
    name could put a formula first)."""
    if cells == [""]:
        return '""\n'
    return ",".join('"' + c.replace('"', '""') + '"' if _QUOTED.search(c) else c for c in cells) + "\n"


def to_csv(df: pd.DataFrame, columns: list[str], sort_key: list[str]) -> str:
    """Rows as the §5 CSV: header row, UTF-8, sorted by the key columns, nulls empty, timestamps ISO UTC.

    A text cell (a str value, never a number or a timestamp: a lag of -4 stays ``-4``) that starts with ``=``,
    ``+``, ``-``, ``@``, a tab or a carriage return is written with a leading ``'``, as OWASP recommends: names come
    from input files, and a spreadsheet opening the file would run such a cell as a formula.
    """
    df = df[columns].copy()
    if len(df):
        df = df.sort_values(sort_key, kind="mergesort", na_position="first").reset_index(drop=True)
    lines = [_csv_line(list(columns))]
    lines += [_csv_line([_csv_cell(v) for v in row]) for row in df.itertuples(index=False, name=None)]
    return "".join(lines)


def correction_lines(corrections: pd.DataFrame) -> tuple[list[str], list[tuple[dict[str, Any], list[str]]]]:
    """The script's variable checks, and per correction row (sorted) its lines: a comment saying what and why, and
    the ``mqadmin`` reset (commented out where it cannot run), or for a broadcast client what to set in its
    offsets.json. The script and the dashboard's group pages both show these lines.

    Names come from input files and none may become code: a comment line shows them escaped (no newline or control
    character can end it), a command holds them only as quoted words, and addresses are read from variables whose
    names are built from the cluster and broker names (:func:`_var_names`: one variable per cluster or broker).
    """
    clusters = sorted(set(corrections["cluster"])) if len(corrections) else []
    brokers = sorted(set(zip(corrections["cluster"], corrections["broker"]))) if len(corrections) else []
    namesrv = {c: f"NAMESRV_{v}" for c, v in _var_names([(c,) for c in clusters]).items()}
    addr = {k: f"BROKER_ADDR_{v}" for k, v in _var_names(brokers).items()}
    checks: list[str] = []
    for c in clusters:
        var = namesrv[(c,)]
        checks += [f"# cluster {_said(c)}: name server in {var}", f': "${{{var}:?set {var}=host:9876}}"']
    for c, b in brokers:
        var = addr[(c, b)]
        checks += [f"# cluster {_said(c)}, broker {_said(b)}: address in {var}",
                   f': "${{{var}:?set {var}=host:port}}"']
    if len(corrections):
        corrections = corrections.sort_values(["cluster", "broker", "consumer_group", "client_id", "topic", "queue_id"])
    rows: list[tuple[dict[str, Any], list[str]]] = []
    for r in corrections.to_dict("records"):
        what = (f"{_said(r['reason'])}: committed {_said(r['committed_offset'])} outside [{_said(r['min_offset'])}, "
                f"{_said(r['max_offset'])}], lost {_said(r['lost_messages'])}")
        where = f"{_said(r['cluster'])} {_said(r['consumer_group'])} {_said(r['topic'])} {_said(r['broker'])}"
        if r.get("client_id"):
            rows.append((r, [f"# broadcast client {_said(r['client_id'])}: {where} queue {_said(r['queue_id'])}: set "
                             f"{_said(r['corrected_offset'])} in its offsets.json ({what})"]))
            continue
        if "\x00" in f"{r['consumer_group']}{r['topic']}":
            prefix = "# not run: a name holds a NUL character, which no shell argument can: "
        elif str(r["consumer_group"]).startswith("-") or str(r["topic"]).startswith("-"):
            # RocketMQ allows a leading '-'; mqadmin's option parser would read the name as an option
            prefix = "# not run: a name starting with '-' is read by mqadmin as an option; reset it by hand: "
        elif int(r["corrected_offset"]) <= 0:
            prefix = "# skipped by mqadmin (offset <= 0): "
        else:
            prefix = ""
        rows.append((r, [f"# {where} queue {_said(r['queue_id'])}: {what}",
                         f"{prefix}mqadmin resetOffsetByTime -n \"${namesrv[(r['cluster'],)]}\" "
                         f"-g {_sh(r['consumer_group'])} -t {_sh(r['topic'])} "
                         f"-b \"${addr[(r['cluster'], r['broker'])]}\" -q {int(r['queue_id'])} "
                         f"-o {int(r['corrected_offset'])} -s now"]))
    return checks, rows


def corrections_script(corrections: pd.DataFrame, run_id: str) -> str:
    """An operator script that applies the offset corrections with mqadmin (RocketMQ 5.1+, formats §8), built from
    :func:`correction_lines`."""
    checks, rows = correction_lines(corrections)
    lines = [
        "#!/usr/bin/env bash",
        f"# Offset corrections of reconcile run {_said(run_id)}: committed offsets outside [MinOffset, MaxOffset].",
        "# Uses mqadmin resetOffsetByTime -b <broker addr> -q <queueId> -o <offset> (RocketMQ 5.1+).",
        "# Set the variables below: the name server of every cluster and the address of every broker (per cluster:",
        "# two clusters can both have a broker-a); review, then run. Limits (formats §8):",
        "#  - mqadmin skips a per-queue reset whose offset is <= 0;",
        "#  - an offline group falls back to resetOffsetByTimeOld (clients must restart);",
        "#  - broadcast offsets live on the clients (offsets.json): fix them there, see the comments.",
        "set -euo pipefail",
        *checks,
    ]
    for _, row_lines in rows:
        lines += row_lines
    return "\n".join(lines) + "\n"


def _said(value: Any) -> str:
    """A value as a script comment may quote it: escaped, so no newline or control character ends the comment."""
    return names.shown(value, limit=10_000)


def _sh(value: Any) -> str:
    """One shell word on one line: single quotes, or bash's ``$'...'`` with escapes for text holding a character
    that is not printable (a newline inside quotes would split the script's lines and hide the rest of a command)."""
    import shlex

    s = str(value)
    if s.isprintable():
        return shlex.quote(s)
    out = []
    for ch in s:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append("".join(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass")))
    return "$'" + "".join(out) + "'"


def _env_name(s: Any) -> str:
    return "".join(ch if ch.isascii() and ch.isalnum() else "_" for ch in str(s)).upper()


def _var_names(keys: Iterable[tuple[Any, ...]]) -> dict[tuple[Any, ...], str]:
    """A shell variable name part per key ((cluster,) or (cluster, broker)), one per key.

    The readable sanitized names joined by ``_`` when no other key gives the same; else each of the keys that
    share it gets ``_`` + the first 8 hex digits of the sha1 of the key as a JSON list (all 40 if those clash too):
    broker-a, broker_a and Broker-A would otherwise all read BROKER_A, and resets meant for one reach another.
    """
    import collections
    import hashlib

    keys = list(dict.fromkeys(keys))
    base = {k: "_".join(_env_name(part) for part in k) for k in keys}
    digest = {k: hashlib.sha1(json.dumps([str(part) for part in k]).encode()).hexdigest().upper() for k in keys}
    width = dict.fromkeys(keys, 0)
    out = dict(base)
    while True:
        seen = collections.Counter(out.values())
        clashing = [k for k in keys if seen[out[k]] > 1]
        if not clashing:
            return out
        for k in clashing:
            if width[k] == 40:
                raise ValueError(f"two names give the variable name {out[k]}")
            width[k] = 8 if width[k] == 0 else 40
            out[k] = f"{base[k]}_{digest[k][:width[k]]}"


def corrected_offset_file(original_text: str | None, rows: Iterable[dict[str, Any]]) -> str:
    """The broker's consumerOffset.json with the corrections applied, in fastjson's own format.

    Starts from the file the snapshot held (so ``dataVersion`` and every other entry stay as they were);
    without it, writes a 4.x-style file with only ``offsetTable``.
    """
    from jobs.formats import fastjson

    doc: dict[Any, Any]
    if original_text:
        doc = fastjson.loads(original_text)
    else:
        doc = {"offsetTable": {}}
    table = doc.setdefault("offsetTable", {})
    # an entry the original holds keeps its place; new ones are added in key order, so the text is the same
    # whatever order the engine returned the rows in
    for r in sorted(rows, key=lambda r: (str(r["topic"]), str(r["consumer_group"]), int(r["queue_id"]))):
        key = f"{r['topic']}@{r['consumer_group']}"
        queues = table.setdefault(key, {})
        queues[int(r["queue_id"])] = int(r["corrected_offset"])
    return fastjson.dumps(doc)


def write_text(uri: str, text: str) -> None:
    storage.write_bytes(uri, text.encode("utf-8"))


SUCCESS = "_SUCCESS"


def publish_folder(folder: str, files: dict[str, str]) -> None:
    """Make ``folder`` hold exactly ``files`` (relative path -> text), all at once or not at all.

    Local: the files are written to a hidden sibling and swapped in by two renames, so a reader sees the old
    folder or the new one, never a mix (a run killed between the renames leaves no folder, and the next run
    writes it). S3 has no rename: ``_SUCCESS`` is removed first and written last, and keys the new run does not
    write are removed, so a folder without ``_SUCCESS`` is one being written. Leftovers of killed runs go first.
    """
    import os
    import shutil
    import uuid

    if storage.is_s3(folder):
        storage.delete_tree(storage.join(folder, SUCCESS))
        for rel, text in files.items():
            write_text(storage.join(folder, rel), text)
        wanted = {storage.join(folder, rel) for rel in files}
        for uri in storage.list_keys(folder.rstrip("/") + "/"):
            if uri not in wanted and not uri.endswith("/" + SUCCESS):
                storage.delete_tree(uri)
        write_text(storage.join(folder, SUCCESS), "")
        return
    parent, name = os.path.split(os.path.abspath(folder))
    if name in ("", ".", "..") or os.path.basename(folder.rstrip("/")) in (".", ".."):
        raise ValueError(f"{folder}: a report folder must be a named folder of its root, not '.' or '..'")
    os.makedirs(parent, exist_ok=True)
    for entry in os.listdir(parent):
        if entry.startswith((f".{name}.staging-", f".{name}.old-")):
            shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
    token = uuid.uuid4().hex[:12]
    staging = os.path.join(parent, f".{name}.staging-{token}")
    for rel, text in files.items():
        path = os.path.join(staging, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    open(os.path.join(staging, SUCCESS), "w").close()
    final = os.path.join(parent, name)
    old = os.path.join(parent, f".{name}.old-{token}")
    if os.path.exists(final):
        os.rename(final, old)
        failpoints.hit("reports.between_renames")
    os.rename(staging, final)
    shutil.rmtree(old, ignore_errors=True)


_CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:12px}
th{background:#f3f3f3}.REWIND,.STALL,.BELOW_MIN,.IN_DLQ,.EXPIRED,.CRITICAL{color:#b00020;font-weight:600}
.WARN,.RETRYING,.SKIPPED,.WARNING{color:#b36b00}
.OK{color:#0a7d32}.muted{color:#777}"""


def index_html(summary: dict[str, Any], frames: dict[str, pd.DataFrame], columns: dict[str, list[str]],
               max_rows: int = 500) -> str:
    """A self-contained dashboard (inline CSS, no scripts, no network) listing every report."""
    esc = html.escape
    kind = summary.get("kind", "")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>RocketMQ reconciliation {esc(summary['run_id'])}"
             f"</title><style>{_CSS}</style></head><body>",
             f"<h1>RocketMQ consumer-progress reconciliation</h1><p>run <b>{esc(summary['run_id'])}</b>"
             + (f" (<span data-field='kind'>{esc(kind)}</span>)" if kind else "")
             + f", as of <b>{esc(summary['as_of'])}</b>"
             + (f", newest snapshot judged <b data-field='newest_snapshot'>{esc(summary['newest_snapshot'])}</b>"
                if summary.get("newest_snapshot") else "")
             + f", lake <code>{esc(summary['lake'])}</code></p>",
             "<h2>Files</h2><ul>"]
    for name in summary["files"]:
        parts.append(f"<li><a href='{esc(urllib.parse.quote(name))}'>{esc(name)}</a></li>")
    parts.append("</ul>")
    sev = summary.get("severities") or {}
    if sev:
        parts.append("<p data-field='severities'>groups: " + ", ".join(
            f"<span class='{esc(k)}'>{esc(k)}</span> {int(v)}" for k, v in reversed(list(sev.items()))) + "</p>")
    parts.append("<h2>Counts</h2><p class='muted'>offsets: each (group, client, queue, offset) once, whatever "
                 "its evidence or kind; the breakdown beside it counts an offset under each evidence it has.</p>"
                 "<table><tr><th>report</th><th>rows</th><th>offsets</th><th>rows by kind</th>"
                 "<th>offsets by evidence or kind</th></tr>")
    for name, info in summary["tables"].items():
        kinds = ", ".join(f"<span class='{esc(k)}'>{esc(k)}</span> {v}" for k, v in info.get("by_kind", {}).items())
        by = info.get("offsets_by_evidence") or info.get("offsets_by_kind") or {}
        offs = ", ".join(f"<span class='{esc(k)}'>{esc(k)}</span> {v}" for k, v in by.items())
        parts.append(f"<tr><td>{esc(name)}</td><td>{info['rows']}</td><td data-offsets='{esc(name)}'>"
                     f"{info.get('offsets', '')}</td><td>{kinds}</td><td>{offs}</td></tr>")
    parts.append("</table><h2>Groups</h2><table><tr><th>group</th><th>severity</th><th>reason</th><th>status</th>"
                 "<th>duplicated offsets</th><th>unconsumed offsets</th><th>lost</th><th>corrections</th>"
                 "<th>dlq</th><th>replay agreement</th></tr>")
    order = {"CRITICAL": 0, "WARNING": 1, "OK": 2}
    for g, info in sorted(summary["groups"].items(), key=lambda kv: (order.get(kv[1].get("severity"), 3), kv[0])):
        agree = info.get("replay_agreement")
        agree_s = "" if agree is None else f"{agree['agreeing']}/{agree['compared']}"
        severity = info.get("severity", "")
        parts.append(f"<tr data-group='{esc(g)}'><td>{esc(g)}</td><td class='{esc(severity)}'>{esc(severity)}</td>"
                     f"<td>{esc(info.get('reason', ''))}</td>"
                     f"<td class='{esc(info.get('status', ''))}'>{esc(info.get('status', ''))}</td>"
                     f"<td>{info.get('duplicated_offsets', 0)}</td><td>{info.get('unconsumed_offsets', 0)}</td>"
                     f"<td>{info.get('lost_offsets', 0)}</td><td>{info.get('corrections', 0)}</td>"
                     f"<td>{info.get('dlq_candidates', 0)}</td><td>{agree_s}</td></tr>")
    parts.append("</table>")
    if summary.get("missing_inputs"):
        parts.append("<h2>Missing input files</h2><p class='muted'>the newest snapshot of each broker that lacks files "
                     "the landing zone should hold (spec §3: reported, never fatal)</p><table><tr><th>cluster</th>"
                     "<th>broker</th><th>snapshot</th><th>lacks</th></tr>")
        for m in summary["missing_inputs"]:
            parts.append(f"<tr><td>{esc(m['cluster'])}</td><td>{esc(m['broker'] or 'clients')}</td>"
                         f"<td>{esc(m['snapshot_ts'])}</td><td>{esc(', '.join(m['missing']))}</td></tr>")
        parts.append("</table>")
    if summary.get("corrected_files_not_written"):
        parts.append("<h2>Corrected offset files not written</h2><table><tr><th>cluster</th><th>broker</th>"
                     "<th>why</th></tr>")
        for m in summary["corrected_files_not_written"]:
            parts.append(f"<tr data-no-corrected='{esc(m['broker'])}'><td>{esc(m['cluster'])}</td>"
                         f"<td>{esc(m['broker'])}</td><td>{esc(m['why'])}</td></tr>")
        parts.append("</table>")
    for name, df in frames.items():
        cols = columns[name]
        parts.append(f"<h2>{esc(name)} <span class='muted'>({len(df)} rows)</span></h2>")
        if not len(df):
            parts.append("<p class='muted'>none</p>")
            continue
        parts.append("<table><tr>" + "".join(f"<th>{esc(c)}</th>" for c in cols) + "</tr>")
        for row in df[cols].head(max_rows).itertuples(index=False, name=None):
            cells = []
            for c, v in zip(cols, row):
                text = esc(_cell(v))
                cls = f" class='{text}'" if c in ("status", "kind", "reason", "evidence") else ""
                cells.append(f"<td{cls}>{text}</td>")
            parts.append("<tr>" + "".join(cells) + "</tr>")
        parts.append("</table>")
        if len(df) > max_rows:
            parts.append(f"<p class='muted'>first {max_rows} of {len(df)} rows; see {esc(name)}.csv</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def summary_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n"
