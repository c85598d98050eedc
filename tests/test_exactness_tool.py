"""The comparison tool itself: it must see a single wrong offset, a wrong kind and a wrong row."""
from __future__ import annotations

import pathlib

from exactness import compare

HEAD = {
    "duplicated_ranges.csv": "cluster,consumer_group,client_id,topic,broker,queue_id,start_offset,end_offset,messages,evidence,cause\n",
    "unconsumed_ranges.csv": "cluster,consumer_group,client_id,topic,broker,queue_id,start_offset,end_offset,messages,kind\n",
    "offset_corrections.csv": "cluster,consumer_group,client_id,topic,broker,queue_id,snapshot_ts,committed_offset,min_offset,max_offset,corrected_offset,lost_messages,reason\n",
    "dlq_candidates.csv": "cluster,consumer_group,client_id,topic,broker,queue_id,queue_offset,uniq_key,keys,reconsume_times,max_reconsume_times,reason,last_attempt_ts,dlq_eta_ts\n",
    "consumer_status.csv": "cluster,consumer_group,client_id,topic,broker,queue_id,snapshot_ts,committed_offset,min_offset,max_offset,lag,consumable_lag,time_lag_s,status\n",
}


def _write(d: pathlib.Path, rows: dict[str, list[str]]) -> pathlib.Path:
    d.mkdir()
    for name, head in HEAD.items():
        (d / name).write_text(head + "".join(r + "\n" for r in rows.get(name, [])))
    return d


def test_split_ranges_equal_one_range_but_a_missing_offset_does_not(tmp_path: pathlib.Path) -> None:
    truth = _write(tmp_path / "t", {"duplicated_ranges.csv": ["c,g,,T,b,0,2101,2200,100,TRACE,HEAD_BLOCKED"]})
    split = _write(tmp_path / "s", {"duplicated_ranges.csv": ["c,g,,T,b,0,2101,2150,50,TRACE,HEAD_BLOCKED",
                                                              "c,g,,T,b,0,2151,2200,50,TRACE,UNKNOWN"]})
    short = _write(tmp_path / "x", {"duplicated_ranges.csv": ["c,g,,T,b,0,2101,2199,99,TRACE,HEAD_BLOCKED"]})
    assert compare(split, truth) == []
    assert compare(split, truth, strict_cause=True)[0].startswith("duplicated_ranges.csv: missing")
    assert compare(short, truth) == ["duplicated_ranges.csv: missing ('c', 'g', '', 'T', 'b', '0', 2200, 'TRACE')"]


def test_wrong_kind_and_wrong_row_are_reported(tmp_path: pathlib.Path) -> None:
    truth = _write(tmp_path / "t", {"unconsumed_ranges.csv": ["c,g,,T,b,0,5,5,1,EXPIRED"],
                                    "consumer_status.csv": ["c,g,,T,b,0,2026-01-05T00:00:00.000Z,1,0,3,2,2,9,STALL"]})
    got = _write(tmp_path / "g", {"unconsumed_ranges.csv": ["c,g,,T,b,0,5,5,1,BACKLOG"],
                                  "consumer_status.csv": ["c,g,,T,b,0,2026-01-05T00:00:00.000Z,1,0,3,2,2,9,WARN"]})
    diffs = compare(got, truth)
    assert diffs[0] == "unconsumed_ranges.csv: missing ('c', 'g', '', 'T', 'b', '0', 5, 'EXPIRED')"
    assert diffs[1] == "unconsumed_ranges.csv: unexpected ('c', 'g', '', 'T', 'b', '0', 5, 'BACKLOG')"
    assert len(diffs) == 4 and "STALL" in diffs[2] and "WARN" in diffs[3]
