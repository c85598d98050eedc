"""What each snapshot of a run sees of a broker's records (jobs.ingest.known_records.KnownRecords.as_of): the records
first seen at or before its time, within the byte ranges decoded by then."""
from __future__ import annotations

import datetime as dt

import numpy as np

from jobs.ingest.known_records import KnownRecords

UTC = dt.timezone.utc
T1, T2, T3 = (dt.datetime(2026, 1, 5, 0, 15 * i, tzinfo=UTC) for i in (1, 2, 3))
LAKE = np.iinfo(np.int64).min  # a record the lake held before the run


def _us(t: dt.datetime) -> int:
    return int(t.timestamp() * 1_000_000)


def _records(seen: list[int]) -> KnownRecords:
    offsets = np.array([0, 100, 200, 300, 400], np.int64)
    return KnownRecords(offsets, np.full(5, 100, np.int32), np.array(seen, np.int64),
                        {T1: [(100, 300)], T2: [(300, 500)]})


def test_each_snapshot_sees_the_records_first_seen_by_its_time_in_commitlog_order() -> None:
    known = _records([LAKE, _us(T1), _us(T1), _us(T2), _us(T3)])  # the usual order: a view of a prefix
    got = {t: known.as_of(t) for t in (T1, T2, T3)}
    assert {t: (r.offsets.tolist(), r.sizes.tolist(), r.rng) for t, r in got.items()} == {
        T1: ([0, 100, 200], [100] * 3, (100, 300)),
        T2: ([0, 100, 200, 300], [100] * 4, (100, 500)),
        T3: ([0, 100, 200, 300, 400], [100] * 5, (100, 500))}
    assert np.shares_memory(got[T1].offsets, known.offsets)  # not a copy of the broker's records
    before = known.as_of(T1 - dt.timedelta(seconds=1))
    assert (before.offsets.tolist(), before.rng) == ([0], None)


def test_records_a_late_folder_saw_first_are_picked_out_of_order() -> None:
    known = _records([LAKE, _us(T2), _us(T1), _us(T3), _us(T1)])  # a late folder: times not in commitlog order
    assert [known.as_of(t).offsets.tolist() for t in (T1, T2, T3)] == [[0, 200, 400], [0, 100, 200, 400],
                                                                        [0, 100, 200, 300, 400]]
