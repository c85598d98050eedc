"""Ingest: landing zone -> bronze and silver tables.

``landing`` (which snapshot folders and store files exist), ``ingest`` (the job: plan, decode, load),
``decode_tasks`` (commitlog work units the engine's tasks decode) and ``sample_landing`` (a landing zone of the
real store files under ``tests/fixtures/real``, the first demo's input).
"""
