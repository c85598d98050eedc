"""``rmq-recon export``: snapshot folders written on the broker (or broadcast consumer) host itself (issue 37).

A store copy ships every commitlog segment whole at every snapshot (the active one is 1 GiB and grows); an export
ships the records stored since the previous export, decoded where they lie by the ingest's own decoder
(:func:`jobs.ingest.decode_tasks.decode_unit`), plus the metadata and consume queue files as they are. The ingest
reads both layouts into the same lake rows (:mod:`jobs.ingest.landing`, ``store-export/``).

* ``layout``: the export layout's names (shared with the ingest); ``stable``: reading files the broker is
  rewriting; ``state``: what the host remembers between runs; ``store`` and ``clients``: the two exports.

Runs with numpy, pyarrow and numba only: no Spark, no lake, on the host.
"""


def host_process() -> None:
    """Set up a process that runs exports on a host (``rmq-recon export``), before it imports pyarrow (and pandas).

    Arrow allocates from the C library's heap there: its default pool (mimalloc) keeps what a run freed, and a bulk
    broker's exporter peaked at 326 MiB against 281 MiB with ``malloc``, for 5-10% more CPU (the 2-hour bench_export
    source, stop 55). Chosen before the import: setting the pool later still left 300 MiB."""
    import os
    import sys

    # pandas (which pyarrow imports at its first conversion of a numpy array) and scipy (which numba imports) are
    # never used by an export: refused unless loaded already (jobs.unused; 0.3 s of CPU at every process start)
    from jobs import unused

    if not any(isinstance(f, unused.Without) for f in sys.meta_path):
        refused = [m for m in ("pandas", "scipy") if m not in sys.modules]
        if refused:
            sys.meta_path.insert(0, unused.Without(*refused, why="is not loaded in an exporter process "
                                                              "(jobs.export.host_process)"))
    if "pyarrow" not in sys.modules:
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
        return
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
