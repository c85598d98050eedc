"""Ingest: landing zone -> bronze and silver tables.

``landing`` (which snapshot folders and store files exist), ``ingest`` (the job: a short sequence of its steps),
one module per step (``plan``, ``snapshot_configs``, ``decode`` with ``segment_ledger``, ``bounds`` with
``known_records`` and ``cq_ledger``, ``exports``, ``load``, ``late``, ``deliveries_update``; their rows gathered
in ``extracted``), ``decode_tasks`` (commitlog work units the engine's tasks decode) and ``sample_landing`` (a
landing zone of the real store files under ``tests/fixtures/real``, the first demo's input).
"""
