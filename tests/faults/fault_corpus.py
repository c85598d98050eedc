"""Issue 15's corpus of bad input, as a generator: one broker store per fault, beside an intact one.

Every broker of the landing zone starts as the same small store (:func:`write_store`): 36 messages of topic ``T``
in three 4 KiB commitlog segments (the newest preallocated, half written), two consume queues, and the config
files with their ``.bak`` (the .bak holds older offsets, so a test can tell which file was loaded). Each fault
then damages its own broker's copy (:data:`FAULTS`); broker ``clean`` stays intact. A test ingests the whole
landing zone once and compares each broker with ``clean``: only what the fault names may differ.
"""
from __future__ import annotations

import os
import pathlib
import random
import shutil
import struct
import zlib
from dataclasses import dataclass, field
from typing import Callable

from jobs.formats.commitlog_encode import CommitLogWriter, tags_hash
from jobs.formats.consumequeue import ConsumeQueueWriter, encode_cq_entry

CLUSTER = "c"
FOLDER = "snapshot_ts=20260105T000000Z"
SEGMENT_SIZE = 4096
MESSAGES = 36
CQ_FILE = 20 * 64  # 64 entries per consume queue file

OFFSETS = b'{\n\t"offsetTable":{\n\t\t"T@G":{0:5,1:7\n\t\t}\n\t}\n}'
OFFSETS_BAK = b'{\n\t"offsetTable":{\n\t\t"T@G":{0:4,1:6\n\t\t}\n\t}\n}'
TOPICS = (b'{"topicConfigTable":{"T":{"perm":6,"readQueueNums":2,"topicName":"T","writeQueueNums":2}},'
          b'"dataVersion":{"counter":1,"timestamp":1767571200000}}')
GROUPS = (b'{"subscriptionGroupTable":{"G":{"groupName":"G","consumeEnable":true,"consumeBroadcastEnable":false,'
          b'"retryMaxTimes":16,"retryQueueNums":1,"brokerId":0,"whichBrokerWhenConsumeSlowly":1}}}')
GROUPS_BAK = GROUPS.replace(b'"retryMaxTimes":16', b'"retryMaxTimes":3')


def write_store(snap: pathlib.Path) -> list[tuple[int, int]]:
    """The intact store; returns (physical offset, size) of every message in commit order."""
    store = snap / "store"
    cl = CommitLogWriter(str(store / "commitlog"), segment_size=SEGMENT_SIZE)
    queues = {q: ConsumeQueueWriter(str(store / "consumequeue" / "T" / str(q)), file_size=CQ_FILE) for q in (0, 1)}
    records = []
    for i in range(MESSAGES):
        q = i % 2
        phys, size = cl.append(topic="T", queue_id=q, queue_offset=i // 2, body=f"body-{i:03d}|".encode() * 16,
                               properties={"UNIQ_KEY": f"K{i:03d}", "TAGS": "a"},
                               born_ts_ms=1767571200000 + i, store_ts_ms=1767571200000 + i,
                               born_host=("10.0.0.1", 40000), store_host=("10.0.0.2", 10911))
        queues[q].append(phys, size, tags_hash("a"))
        records.append((phys, size))
    cl.close()
    config = store / "config"
    config.mkdir(parents=True)
    for name, data in {"consumerOffset.json": OFFSETS, "consumerOffset.json.bak": OFFSETS_BAK,
                       "topics.json": TOPICS, "subscriptionGroup.json": GROUPS,
                       "subscriptionGroup.json.bak": GROUPS_BAK}.items():
        (config / name).write_bytes(data)
    return records


RECORDS: list[tuple[int, int]] = []  # filled by build(): the same for every broker


def _record(i: int) -> tuple[int, int]:
    return RECORDS[i]


def _segment_of(phys: int) -> str:
    return f"store/commitlog/{phys - phys % SEGMENT_SIZE:020d}"


def _in_segment(start: int) -> set[int]:
    return {p for p, _ in RECORDS if start <= p < start + SEGMENT_SIZE}


def _patch(path: pathlib.Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


@dataclass
class Fault:
    """A fault: how it damages a store and what may differ from the intact broker afterwards."""

    damage: Callable[[pathlib.Path], None]
    quarantined: Callable[[], set[tuple[str, int, str]]]  # (path in the snapshot folder, position, reason)
    offsets: list[tuple[int, int]] | None = field(default_factory=lambda: [(0, 5), (1, 7)])  # queue, committed
    offsets_from_backup: bool = False
    lost: Callable[[], set[int]] = set  # physical offsets of messages that do not land
    max_retry_times: int | None = 16  # subscription group G (3 when the .bak was loaded)
    bounds: dict[int, tuple[int, int]] | None = None  # queue -> (min, max) when it differs
    other_folder: str | None = None  # a second snapshot folder the fault adds (layout faults)


# --------------------------------------------------------------------------- JSON


def _co(data: bytes) -> Callable[[pathlib.Path], None]:
    return lambda snap: (snap / "store/config/consumerOffset.json").write_bytes(data)


CO = "store/config/consumerOffset.json"
BAK = "; loaded the .bak instead"


def _nested() -> bytes:
    return b'{"offsetTable":{"T@G":' + b"[" * 10_000 + b"]" * 10_000 + b"}}"


def _garbage_50mb(snap: pathlib.Path) -> None:
    rnd = random.Random(50)
    (snap / CO).write_bytes(rnd.randbytes(50 << 20))


def _garbage_reason() -> set[tuple[str, int, str]]:
    data = random.Random(50).randbytes(64)
    try:
        data.decode("utf-8")
        raise AssertionError("the garbage prefix decodes")
    except UnicodeDecodeError as exc:
        return {(CO, exc.start, f"not valid UTF-8 (byte {exc.start}: {exc.reason}){BAK}")}


# --------------------------------------------------------------------------- commitlog


def _flip(field_at: int, record: int) -> Callable[[pathlib.Path], None]:
    def damage(snap: pathlib.Path) -> None:
        phys, _ = _record(record)
        path = snap / _segment_of(phys)
        at = phys % SEGMENT_SIZE + field_at
        old = path.read_bytes()[at:at + 4]
        _patch(path, at, bytes(b ^ 0xFF for b in old))
    return damage


def _set_size(record: int, size: Callable[[], int]) -> Callable[[pathlib.Path], None]:
    def damage(snap: pathlib.Path) -> None:
        phys, _ = _record(record)
        _patch(snap / _segment_of(phys), phys % SEGMENT_SIZE, struct.pack(">i", size()))
    return damage


def _truncate(path: str, size: Callable[[], int]) -> Callable[[pathlib.Path], None]:
    def damage(snap: pathlib.Path) -> None:
        with open(snap / path, "r+b") as f:
            f.truncate(size())
    return damage


def _random_segment(snap: pathlib.Path) -> None:
    (snap / f"store/commitlog/{SEGMENT_SIZE:020d}").write_bytes(random.Random(1).randbytes(1 << 20))


def _rename_newest(snap: pathlib.Path) -> None:
    seg = snap / f"store/commitlog/{2 * SEGMENT_SIZE:020d}"
    seg.rename(seg.with_name(f"{2 * SEGMENT_SIZE:019d}"))


# --------------------------------------------------------------------------- consume queue


def _cq_past_commitlog(snap: pathlib.Path) -> None:
    path = snap / "store/consumequeue/T/0/00000000000000000000"
    _patch(path, 18 * 20, encode_cq_entry(1 << 30, 200, tags_hash("a")))  # queue 0 has 18 entries: the 19th


def _cq_ragged(snap: pathlib.Path) -> None:
    with open(snap / "store/consumequeue/T/1/00000000000000000000", "ab") as f:
        f.write(b"\x00" * 7)


# --------------------------------------------------------------------------- layout


def _bad_folder(snap: pathlib.Path) -> None:
    shutil.copytree(snap, snap.parent / "snapshot_ts=2026-01-05T01:00")


def _unreadable(path: str) -> Callable[[pathlib.Path], None]:
    return lambda snap: os.chmod(snap / path, 0)


def _symlink_loop(snap: pathlib.Path) -> None:
    (snap / CO).unlink()
    os.symlink("consumerOffset.json", snap / CO)


def _folder_for_file(snap: pathlib.Path) -> None:
    (snap / "store/config/subscriptionGroup.json").unlink()
    (snap / "store/config/subscriptionGroup.json").mkdir()
    (snap / "store/config/subscriptionGroup.json/part-0").write_bytes(GROUPS)


def _files_of_bad_folder() -> set[tuple[str, int, str]]:
    return set()  # filled in by the test from the listing (every file of the copied folder)


NON_UTF8_AT = OFFSETS.index(b"T@G") + 2
Q0, Q1 = OFFSETS.index(b"{0:") + 1, OFFSETS.index(b",1:") + 1  # where each queue's entry starts
# {"offsetTable":{"T@G": is 22 characters and two levels; the 199th '[' is level 201, one past fastjson.MAX_DEPTH
NESTED_AT = 22 + 198
SEG0 = f"store/commitlog/{0:020d}"
SEG1 = f"store/commitlog/{SEGMENT_SIZE:020d}"
SEG2 = f"store/commitlog/{2 * SEGMENT_SIZE:020d}"
SKIP = "; skipped to the next valid record"
CUT = "; no valid record after it in this copy: the segment's next copy is read from here"


def _crc(i: int) -> int:
    """The body CRC of message ``i`` as written (write_store's body)."""
    return zlib.crc32(f"body-{i:03d}|".encode() * 16) & 0x7FFFFFFF


def _rec(i: int) -> int:
    return _record(i)[0] % SEGMENT_SIZE


FAULTS: dict[str, Fault] = {
    # ---- JSON
    "json_truncated_good_bak": Fault(
        _co(OFFSETS[:25]), lambda: {(CO, 21, f"unterminated string (file truncated?){BAK}")},
        offsets=[(0, 4), (1, 6)], offsets_from_backup=True),
    "json_truncated_broken_bak": Fault(
        lambda s: (_co(OFFSETS[:25])(s), (s / (CO + ".bak")).write_bytes(OFFSETS_BAK[:16])),
        lambda: {(CO, 21, "unterminated string (file truncated?); the .bak could not be used either"),
                 (CO + ".bak", 16, "unexpected end of input (file truncated?)")}, offsets=None),
    "json_empty": Fault(_co(b""), lambda: {(CO, 0, f"empty file{BAK}")}, offsets=[(0, 4), (1, 6)],
                        offsets_from_backup=True),
    "json_non_utf8": Fault(_co(OFFSETS.replace(b"T@G", b"T@\xffG")),
                           lambda: {(CO, NON_UTF8_AT, f"not valid UTF-8 (byte {NON_UTF8_AT}: invalid start byte){BAK}")},
                           offsets=[(0, 4), (1, 6)], offsets_from_backup=True),
    "json_negative_offset": Fault(_co(OFFSETS.replace(b"0:5", b"0:-5")), lambda: {
        (CO, Q0, "'T@G' queue 0: offset -5 is not a non-negative integer: entry skipped")}, offsets=[(1, 7)]),
    "json_offset_beyond_2_63": Fault(_co(OFFSETS.replace(b"0:5", b"0:9223372036854775808")), lambda: {
        (CO, Q0, "'T@G' queue 0: offset 9223372036854775808 is beyond 2^63-1 (a Java long): entry skipped")},
        offsets=[(1, 7)]),
    "json_string_offset": Fault(_co(OFFSETS.replace(b"1:7", b'1:"7"')), lambda: {
        (CO, Q1, "'T@G' queue 1: offset '7' is not a non-negative integer: entry skipped")}, offsets=[(0, 5)]),
    "json_key_without_at": Fault(_co(OFFSETS.replace(b"T@G", b"TG")), lambda: {
        (CO, 21, "key 'TG' is not 'topic@group' with exactly one '@': entry skipped (as the broker's "
                 "whichTopicByConsumer does)")}, offsets=None),
    "json_nested_10000_deep": Fault(_co(_nested()), lambda: {
        (CO, NESTED_AT, f"nesting deeper than 200 levels{BAK}")}, offsets=[(0, 4), (1, 6)], offsets_from_backup=True),
    "json_garbage_50mb": Fault(_garbage_50mb, _garbage_reason, offsets=[(0, 4), (1, 6)], offsets_from_backup=True),
    "json_5000_digit_number": Fault(_co(OFFSETS.replace(b"0:5", b"0:" + b"9" * 5000)), lambda: {
        (CO, Q0, f"'T@G' queue 0: offset {'9' * 12}... (5000 digits) is beyond 2^63-1 (a Java long): entry "
                 "skipped")}, offsets=[(1, 7)]),
    # ---- commitlog
    "commitlog_truncated_mid_record": Fault(
        _truncate(SEG2, lambda: _rec(31) + 50),
        lambda: {(SEG2, _rec(31), f"record at byte {_rec(31)}: size {_record(31)[1]} runs past the end of the segment "
                 f"({_rec(31) + 50} bytes){CUT}")},
        lost=lambda: {p for p, _ in RECORDS[31:]}),
    "commitlog_flipped_magic": Fault(
        _flip(4, 2), lambda: {(SEG0, _rec(2), f"record at byte {_rec(2)}: bad magic code 0x255cdf58 (size field "
                                              f"{_record(2)[1]}){SKIP}")},
        lost=lambda: {_record(2)[0]}),
    "commitlog_flipped_size": Fault(
        _set_size(2, lambda: _record(2)[1] + 8),
        lambda: {(SEG0, _rec(2), f"record at byte {_rec(2)}: size field {_record(2)[1] + 8} runs over the next record "
                                 f"at byte {_rec(3)}; record skipped")},
        lost=lambda: {_record(2)[0]}),
    "commitlog_flipped_body_crc": Fault(
        _flip(8, 2), lambda: {(SEG0, _rec(2), f"record at byte {_rec(2)}: body CRC {_crc(2)} does not match the stored "
                                              f"{_crc(2) ^ -1} (body or CRC damaged in this copy); header kept, body "
                                              "not used")}),
    "commitlog_size_past_file": Fault(
        _set_size(3, lambda: 0x7FFF0000),
        lambda: {(SEG0, _rec(3), f"record at byte {_rec(3)}: size {0x7FFF0000} runs past the end of the segment "
                                 f"({SEGMENT_SIZE} bytes){SKIP}")},
        lost=lambda: {_record(3)[0]}),
    "commitlog_name_not_20_digits": Fault(
        _rename_newest, lambda: {(f"store/commitlog/{2 * SEGMENT_SIZE:019d}", 0,
                                  "commitlog file name is not 20 digits (the segment's start offset): not read")},
        lost=lambda: _in_segment(2 * SEGMENT_SIZE)),
    "commitlog_zero_length": Fault(  # the newest segment may be empty (just created), an older one may not
        _truncate(SEG1, lambda: 0), lambda: {
            (SEG1, 0, "empty commitlog segment (0 bytes) followed by a newer one: its records are missing from this "
                      "copy; nothing read")},
        lost=lambda: _in_segment(SEGMENT_SIZE)),
    "commitlog_random_1mib": Fault(
        _random_segment, lambda: {(SEG1, 0, "record at byte 0: bad magic code 0x%08x (size field %d)%s" % (
            int.from_bytes(random.Random(1).randbytes(8)[4:], "big"),
            int.from_bytes(random.Random(1).randbytes(8)[:4], "big", signed=True), CUT))},
        lost=lambda: _in_segment(SEGMENT_SIZE)),
    # ---- consume queue
    # an entry past the end of the copied commitlog is valid (a sync copies the commitlog first; the live broker's
    # maxOffset counts it): not quarantined, and Max counts it (docs/semantics.md rule 6)
    "cq_entry_past_commitlog": Fault(_cq_past_commitlog, set, bounds={0: (0, 19)}),
    "cq_length_not_multiple_of_20": Fault(
        _cq_ragged, lambda: {("store/consumequeue/T/1/00000000000000000000", CQ_FILE,
                              f"file size {CQ_FILE + 7} is not a multiple of 20: trailing 7 bytes ignored")}),
    # ---- layout
    "layout_malformed_snapshot_folder": Fault(_bad_folder, _files_of_bad_folder,
                                              other_folder="snapshot_ts=2026-01-05T01:00"),
    "layout_unreadable_config": Fault(
        _unreadable(CO), lambda: {(CO, 0, f"unreadable ([Errno 13] Permission denied){BAK}")},
        offsets=[(0, 4), (1, 6)], offsets_from_backup=True),
    "layout_unreadable_segment": Fault(
        _unreadable(SEG1), lambda: {(SEG1, 0, "unreadable ([Errno 13] Permission denied): not read; fix it, then run "
                                              "ingest --retake")},
        lost=lambda: _in_segment(SEGMENT_SIZE)),
    "layout_symlink_loop": Fault(
        # a link (a loop here) is never followed: quarantined by name, and the broker's .bak is loaded instead
        _symlink_loop, lambda: {(CO, 0, "not a regular file (a symbolic link, a device or a pipe): not read; the sync "
                                        "job must copy the file, not link it")},
        offsets=[(0, 4), (1, 6)], offsets_from_backup=True),
    "layout_folder_where_a_file_belongs": Fault(
        _folder_for_file, lambda: {("store/config/subscriptionGroup.json/part-0", 0,
                                    "'store/config/subscriptionGroup.json' is a folder where RocketMQ writes a file: "
                                    "file ignored")}, max_retry_times=3),
}


def build(root: pathlib.Path) -> pathlib.Path:
    """The landing zone: broker ``clean`` and one broker per fault, under ``root/landing``."""
    landing = root / "landing"
    for broker in ["clean", *FAULTS]:
        snap = landing / f"cluster={CLUSTER}" / f"broker={broker}" / FOLDER
        records = write_store(snap)
        if not RECORDS:
            RECORDS.extend(records)
        assert records == RECORDS
        if broker != "clean":
            FAULTS[broker].damage(snap)
    return landing
