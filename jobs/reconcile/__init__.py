"""Reconcile: silver tables -> gold tables and the report folder.

``reconcile`` (the job), ``horizon`` (a scheduled run recomputes only what can still change), ``reports`` (the
report folder) and ``gold_runs`` (completed runs and their gold rows, read narrowly).
"""
