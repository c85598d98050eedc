"""The export layout: what ``rmq-recon export`` writes in a snapshot folder besides RocketMQ's own files.

``cluster=C/broker=B/snapshot_ts=T/``
  ``store/config/...``, ``store/batchconsumequeue/...``: the files the ingest reads, as they are on the host (no
  commitlog segment, no consume queue file);
  ``store-export/records-<lo>-<hi>.parquet``: the commitlog's records decoded since the previous export, rows of
  :data:`jobs.ingest.decode_tasks.OUTPUT_ARROW` (trace records, POP checkpoints and acks, the decode's problems and
  one progress row per retained segment), ``lo``/``hi`` the physical offsets (20 digits) of the bytes they were
  decoded from;
  ``store-export/messages-<lo>-<hi>.parquet`` (layout 2; beside the records part of the same range when its bytes
  held messages): the messages, as a file of silver/messages (:data:`jobs.ingest.decode_tasks.MESSAGES_ARROW`: one
  broker, in commitlog order, with Parquet statistics), which the ingest adds to the table as it is
  (:func:`jobs.lake.layout.append`'s ``adopt``) instead of writing the rows again; in layout 1 the messages were rows
  of the records part;
  ``store-export/queues.bin``: the consume queue files' bytes appended since the previous export
  (:mod:`jobs.export.queues`); the manifest's ``queues`` lists each queue file of the store as pieces of this and
  earlier folders' packs, which the ingest reads back as the file (:func:`jobs.ingest.landing.read_file`);
  ``store-export/manifest.json``: the host's commitlog listing, the parts, the queue files, the other files;
  ``_SUCCESS``: written last.
"""
from __future__ import annotations

import datetime as dt
import re
from typing import Any

import msgspec

FOLDER = "store-export"
MANIFEST = f"{FOLDER}/manifest.json"
PACK = f"{FOLDER}/queues.bin"
LAYOUT = "rmq-recon-export/2"
# the layouts the ingest reads: 1 held the messages in the records parts (until stop 70). An ingest older than
# layout 2 refuses its folders by this name, where it would have read no message from them.
LAYOUTS = ("rmq-recon-export/1", LAYOUT)


class QueueFile(msgspec.Struct, frozen=True):
    """A consume queue file of the manifest's ``queues``: its pieces (pack folder's time tag, offset in that pack,
    length, position in the file), as :class:`jobs.export.queues.Packer` lists them."""

    rel: str
    size: int
    mtime: float
    id: str
    pieces: tuple[tuple[str, int, int, int], ...]


class Manifest(msgspec.Struct):
    """The manifest's fields (:func:`jobs.export.store.export`); one not named here is ignored."""

    layout: Any = None
    cluster: Any = None
    broker: Any = None
    snapshot_ts: Any = None
    segments: Any = None
    listing_problems: Any = None
    parts: Any = None
    counts: Any = None
    files: Any = None
    queues: list[QueueFile] = []
    queue_bytes: Any = None
    store_dirs: Any = None
    cpu_s: Any = None


_DECODER = msgspec.json.Decoder(Manifest)


def read_manifest(raw: bytes) -> dict[str, Any]:
    """A manifest as a dict, its ``queues`` entries as :class:`QueueFile`: read typed, which also checks each entry's
    fields. A bulk broker's manifest lists ~400 k pieces (bench_export's 240 manifests: 20 MB; ``json.loads`` took
    0.6 s of the ingest, this 0.17 s).

    Raises:
        ValueError: not a manifest (``msgspec.DecodeError``, which is one, names the field).
    """
    doc = _DECODER.decode(raw)
    return {name: value for name in doc.__struct_fields__ if (value := getattr(doc, name)) is not None}


def parse_snapshot_ts(value: str) -> dt.datetime:
    """``--snapshot-ts``: ISO-8601 (UTC when it names no zone) or the folders' YYYYMMDDTHHMMSSZ.

    Raises:
        ValueError: neither.
    """
    t = (dt.datetime.strptime(value, "%Y%m%dT%H%M%SZ") if re.fullmatch(r"\d{8}T\d{6}Z", value)
         else dt.datetime.fromisoformat(value))
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def snapshot_ts_option(value: str) -> dt.datetime:
    """:func:`parse_snapshot_ts` of the ``--snapshot-ts`` option (the CLI's, the snapshot DAG's Param).

    Raises:
        UsageError: neither form.
    """
    from jobs.problems import UsageError

    try:
        return parse_snapshot_ts(value)
    except ValueError:
        raise UsageError(f"--snapshot-ts {value!r}: expected ISO-8601 UTC or YYYYMMDDTHHMMSSZ") from None


def part_name(lo: int, hi: int) -> str:
    return f"{FOLDER}/records-{lo:020d}-{hi:020d}.parquet"


def messages_name(lo: int, hi: int) -> str:
    return f"{FOLDER}/messages-{lo:020d}-{hi:020d}.parquet"


def is_part(rel: str) -> bool:
    return _is(rel, "records-")


def is_messages(rel: str) -> bool:
    return _is(rel, "messages-")


def _is(rel: str, prefix: str) -> bool:
    parts = rel.split("/")
    return len(parts) == 2 and parts[0] == FOLDER and parts[1].startswith(prefix) and parts[1].endswith(".parquet")


def segments_of(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The host's commitlog segments at the export (name, start, size), oldest first."""
    return sorted(manifest.get("segments", []), key=lambda s: s["start"])
