"""SQLite connection settings for the local Airflow services (``infra/airflow.sh``).

The scheduler, dag-processor, api-server and CLI commands all write the one SQLite file. Python's default busy
timeout (5 s) lets a CLI write such as ``airflow backfill create`` fail with "database is locked" while the
scheduler holds a transaction; waiting up to 60 s serialises them instead. Airflow imports this dict through
``AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS=infra.airflow_sqlite.CONNECT_ARGS``.
"""
CONNECT_ARGS = {"timeout": 60}
