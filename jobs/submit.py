"""``spark-submit`` entry point: the same jobs as ``rmq-recon``, on the session spark-submit builds.

Example (a cluster that can fetch Delta)::

    zip -r rmq_recon.zip jobs schemas expectations
    spark-submit --master yarn --packages io.delta:delta-spark_2.13:4.4.1 \\
      --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \\
      --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \\
      --py-files rmq_recon.zip jobs/submit.py reconcile --lake s3://lake --reports s3://reports

Airflow's ``SparkSubmitOperator(application="jobs/submit.py", application_args=[...], py_files=...)`` does the
same. The engine is forced to ``submit`` so that the job uses the cluster's session, never a local one.
"""
from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    os.environ["RMQ_RECON_ENGINE"] = "submit"
    from jobs import cli

    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
