"""``rmq-recon export --client-offsets``: a broadcast consumer host's offset files as a clients snapshot folder.

``LocalFileOffsetStore`` keeps ``<localOffsetStoreDir>/<clientId>/<group>/offsets.json`` (default
``~/.rocketmq_offsets``) and its ``.bak``, rewritten by ``MixAll.string2File`` every persist interval: each is read
as one version (:func:`jobs.export.stable.read_stable`) into ``cluster=C/clients/snapshot_ts=T/<clientId>/<group>/``.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Callable

from jobs.export import stable
from jobs.ingest import landing
from jobs.lake import storage
from jobs.problems import UsageError

UTC = dt.timezone.utc


def export_clients(offsets_dir: str, to: str, *, cluster: str, snapshot_ts: dt.datetime | None = None,
                   say: Callable[[str], None] = print) -> dict[str, Any]:
    """Write the clients folder; returns what it holds. Raises UsageError when ``offsets_dir`` holds no
    ``offsets.json`` (a run never reports success on nothing)."""
    root = Path(offsets_dir)
    if not root.is_dir():
        raise UsageError(f"--client-offsets {offsets_dir}: not a folder (the client's localOffsetStoreDir, "
                         "by default ~/.rocketmq_offsets)")
    ts = (snapshot_ts or dt.datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    folder = storage.join(to, f"cluster={cluster}/clients/snapshot_ts={landing.format_snapshot_ts(ts)}")
    if storage.exists(storage.join(folder, landing.MARKER)):
        raise UsageError(f"{folder} already holds a complete snapshot; choose another --snapshot-ts")
    found = []
    for path in sorted(root.glob("*/*/offsets.json*")):
        if path.name not in ("offsets.json", "offsets.json.bak") or not path.is_file():
            continue
        data = stable.read_stable(path)
        if data is None:
            continue
        rel = path.relative_to(root).as_posix()
        found.append((rel, data))
    if not any(rel.endswith("/offsets.json") for rel, _ in found):
        raise UsageError(f"--client-offsets {offsets_dir}: no <clientId>/<group>/offsets.json below it; nothing "
                         "exported")
    storage.delete_tree(folder)  # what a killed run at this time left
    for rel, data in found:
        storage.write_bytes(storage.join(folder, rel), data)
    storage.write_bytes(storage.join(folder, landing.MARKER), b"")
    say(f"export: {folder}: {sum(rel.endswith('/offsets.json') for rel, _ in found)} offsets.json file(s)")
    return {"folder": folder, "files": [rel for rel, _ in found]}
