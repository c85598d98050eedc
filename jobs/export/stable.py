"""Reading files the broker rewrites while the export runs.

The broker saves a config (``MixAll.string2File``) by writing ``<name>.tmp``, renaming ``<name>`` to ``<name>.bak``
and ``<name>.tmp`` to ``<name>``: between the two renames the file does not exist, and a read racing a rewrite can
mix two versions. A RocksDB directory loses files to compaction while it is copied. Such a read is retried, never
shipped torn.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

TRIES = 20
PAUSE_S = 0.05


class TornRead(OSError):
    """A file kept changing (or kept vanishing) across every try."""


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns


def read_stable(path: str | Path, *, tries: int = TRIES, pause_s: float = PAUSE_S) -> bytes | None:
    """The bytes of ``path`` as one version: the same inode, size and mtime before and after the read.

    Returns None when the file is gone on every try (deleted, not renamed).

    Raises:
        TornRead: it changed during every try.
    """
    gone = 0
    for _ in range(tries):
        try:
            before = os.stat(path)
            with open(path, "rb") as fh:
                data = fh.read()
            after = os.stat(path)
        except FileNotFoundError:  # between the broker's two renames
            gone += 1
            time.sleep(pause_s)
            continue
        if _stamp(before) == _stamp(after) and len(data) == after.st_size:
            return data
        time.sleep(pause_s)
    if gone == tries:
        return None
    raise TornRead(f"{path}: changed during each of {tries} reads {pause_s:g} s apart; not exported (run the export "
                   "again)")


def _is_info_log(name: str) -> bool:
    """RocksDB's info log (``LOG``, ``LOG.old.<time>``): it grows while the broker runs, and nothing reads it."""
    return name == "LOG" or name.startswith("LOG.old.")


def _db_files(src: Path, flat: bool) -> list[Path]:
    found = src.iterdir() if flat else src.rglob("*")
    return sorted(p for p in found if p.is_file() and not _is_info_log(p.name))


def copy_dir_stable(src: str | Path, dst: str | Path, *, flat: bool = False, tries: int = TRIES,
                    pause_s: float = PAUSE_S) -> int:
    """Copy the directory ``src`` (a RocksDB database) to ``dst`` as one version: copied again whole when a file
    vanished or changed during the copy (compaction replaced it). ``flat``: only the files directly in ``src`` (the
    RocksDB consume queue's files sit beside the file queue's topic folders). Returns the number of files."""
    src, dst = Path(src), Path(dst)
    for _ in range(tries):
        shutil.rmtree(dst, ignore_errors=True)
        try:
            names = _db_files(src, flat)
            stamps = {p: _stamp(p.stat()) for p in names}
            for p in names:
                target = dst / p.relative_to(src)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, target)
            if all(_stamp(p.stat()) == stamps[p] for p in names) and _db_files(src, flat) == names:
                return len(names)
        except FileNotFoundError:
            pass
        time.sleep(pause_s)
    raise TornRead(f"{src}: its files changed during each of {tries} copies; not exported (run the export again)")
