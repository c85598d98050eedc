"""``rmq-recon export``: snapshot folders written on the broker (or broadcast consumer) host itself (issue 37).

A store copy ships every commitlog segment whole at every snapshot (the active one is 1 GiB and grows); an export
ships the records stored since the previous export, decoded where they lie by the ingest's own decoder
(:func:`jobs.ingest.decode_tasks.decode_unit`), plus the metadata and consume queue files as they are. The ingest
reads both layouts into the same lake rows (:mod:`jobs.ingest.landing`, ``store-export/``).

* ``layout``: the export layout's names (shared with the ingest); ``stable``: reading files the broker is
  rewriting; ``state``: what the host remembers between runs; ``store`` and ``clients``: the two exports.

Runs with numpy, pyarrow and numba only: no Spark, no lake, on the host.
"""
