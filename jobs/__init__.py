"""PySpark jobs of the RocketMQ reconciliation pipeline and the library they share, grouped the way data flows.

* ``formats/``: RocketMQ's formats, pure Python and numpy (no Spark, no lake): ``fastjson``, ``configs``,
  ``commitlog`` (layout and decoder), ``commitlog_encode`` (encoder), ``consumequeue``, ``trace``, ``msgid``,
  ``topics``.
* ``ingest/``: landing zone -> bronze and silver: ``landing``, ``ingest`` (the job), ``decode_tasks``,
  ``sample_landing``.
* ``rules/``: the reconciliation rules, pure DataFrame transforms: ``snapshots``, ``deliveries``, ``replay``,
  ``ranges``, ``duplicates``, ``unconsumed``, ``corrections``, ``dlq``, ``status``, ``audit``.
* ``reconcile/``: silver -> gold and the report folder: ``reconcile`` (the job), ``horizon``, ``reports``,
  ``gold_runs``.
* ``ops/``: after the pipeline: ``quality``, ``alerts``, ``notifiers``, ``metrics``, ``dashboard``,
  ``maintenance``.
* ``lake/``: plumbing that knows no rule and no job: ``_spark``, ``_delta``, ``storage``, ``lease``, ``ledger``,
  ``failpoints``, ``interrupts``, ``engine_config``.
* top: ``cli`` (``rmq-recon``), ``submit`` (spark-submit), ``demo``, ``problems`` (named errors, shared);
  ``simulate/`` (the fleet simulator).

Imports go down only: ``cli`` -> ``ops`` -> ``ingest``, ``reconcile`` -> ``rules`` -> ``formats``, and every group
-> ``lake``.
"""
