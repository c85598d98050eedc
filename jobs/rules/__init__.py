"""The reconciliation rules: pure ``DataFrame -> DataFrame`` transforms (no session, paths, clock or collect).

``snapshots`` (the shared preparation: committed-offset series and message lookups), ``deliveries``
(silver/deliveries from trace records), ``replay``, ``ranges``, ``duplicates``, ``unconsumed``, ``corrections``,
``dlq``, ``status`` and ``audit``, one module per gold table or concept.
"""
