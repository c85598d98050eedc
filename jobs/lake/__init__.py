"""Plumbing under every job: engines, lake tables, files and run control; nothing here knows a rule or a job.

``_spark`` (the one place that builds a session), ``_delta`` (lake table I/O), ``storage`` (local or ``s3://``
files), ``lease`` (one writer at a time), ``ledger`` (completed runs and their table versions), ``failpoints``
(named kill points for the fault tests), ``interrupts`` (SIGINT/SIGTERM) and ``engine_config`` (what the DAG
boundary hands the jobs).
"""
