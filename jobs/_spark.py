"""The one place that builds a Spark session.

Three engines, chosen by configuration only (job code is identical for all of them):

* ``sail`` (default): an embedded Sail Spark Connect server started in this process, with Delta built in.
* ``connect``: a Spark Connect server elsewhere, from ``SPARK_REMOTE=sc://host:port``.
* ``classic``: a local JVM Spark (``local[2]``), used by the engine-parity tests on Parquet/in-memory data.
* ``submit``: the session ``spark-submit`` configured (YARN, Kubernetes, standalone; Delta from ``--packages``).

Why a context manager: the Sail server must stop *after* the session, or the interpreter hangs at exit
for ten minutes; ``session()`` guarantees that order.
"""
from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Literal

from pyspark.sql import SparkSession

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

Engine = Literal["sail", "connect", "classic", "submit"]
log = logging.getLogger(__name__)

# Sail's log: warnings, but not the one its actor system writes on every orderly shutdown ("aborting N task(s) for
# SessionManagerActor"), which Airflow showed as a red ERROR line in every task log.
RUST_LOG_DEFAULT = "warn,sail_common::actor=error"

_S3_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ALLOW_HTTP")


def engine_from_env() -> Engine:
    """``RMQ_RECON_ENGINE`` if set, else ``connect`` when ``SPARK_REMOTE`` is set, else ``sail``."""
    explicit = os.environ.get("RMQ_RECON_ENGINE", "").strip().lower()
    if explicit:
        if explicit not in ("sail", "connect", "classic", "submit"):
            raise ValueError(f"RMQ_RECON_ENGINE={explicit!r}: expected one of sail, connect, classic, submit")
        return explicit  # type: ignore[return-value]
    return "connect" if os.environ.get("SPARK_REMOTE") else "sail"


def _normalise_s3_env() -> None:
    """Sail reads S3 settings from the environment before its server starts; fill the aliases it looks for."""
    if os.environ.get("AWS_ENDPOINT_URL") and not os.environ.get("AWS_ENDPOINT"):
        os.environ["AWS_ENDPOINT"] = os.environ["AWS_ENDPOINT_URL"]
    if os.environ.get("AWS_ENDPOINT") and not os.environ.get("AWS_ENDPOINT_URL"):
        os.environ["AWS_ENDPOINT_URL"] = os.environ["AWS_ENDPOINT"]
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    if endpoint.startswith("http://"):
        os.environ.setdefault("AWS_ALLOW_HTTP", "true")
    if endpoint:
        os.environ.setdefault("AWS_REGION", "us-east-1")


def _s3_conf() -> dict[str, str]:
    """Hadoop S3A settings for engines that take them as configuration (classic Spark, clusters)."""
    conf: dict[str, str] = {}
    if os.environ.get("AWS_ENDPOINT_URL"):
        conf["spark.hadoop.fs.s3a.endpoint"] = os.environ["AWS_ENDPOINT_URL"]
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        conf["spark.hadoop.fs.s3a.access.key"] = os.environ["AWS_ACCESS_KEY_ID"]
        conf["spark.hadoop.fs.s3a.secret.key"] = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    return conf


@contextmanager
def session(engine: Engine | None = None, *, remote: str | None = None) -> Iterator[SparkSession]:
    """Yield a Spark session on the chosen engine and stop it (and any embedded server) afterwards.

    Args:
        engine: ``sail``, ``connect`` or ``classic``; default from :func:`engine_from_env`.
        remote: a ``sc://host:port`` address for ``connect``; default ``SPARK_REMOTE``.
    """
    engine = engine or engine_from_env()
    _normalise_s3_env()
    server = None
    if engine == "sail":
        os.environ.setdefault("RUST_LOG", RUST_LOG_DEFAULT)
        from pysail.spark import SparkConnectServer

        server = SparkConnectServer(ip="127.0.0.1", port=0)
        server.start(background=True)
        host, port = server.listening_address
        builder = SparkSession.builder.remote(f"sc://{host}:{port}")
    elif engine == "connect":
        address = remote or os.environ.get("SPARK_REMOTE")
        if not address:
            raise ValueError("engine 'connect' needs SPARK_REMOTE=sc://host:port (or an Airflow spark_connect connection)")
        builder = SparkSession.builder.remote(address)
    elif engine == "classic":
        os.environ.pop("SPARK_REMOTE", None)
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers (applyInPandas) must run this interpreter, which has pandas and pyarrow; pyspark's
        # default is whatever `python3` is on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        # py4j logs "Closing down clientserver connection" from __del__ at interpreter exit, after the streams
        # closed ("--- Logging error ---" in every run's output)
        logging.getLogger("py4j").setLevel(logging.WARNING)
        builder = (
            SparkSession.builder.master("local[2]")
            .appName("rmq-recon")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.driver.memory", "2g")
        )
        for k, v in _s3_conf().items():
            builder = builder.config(k, v)
    elif engine == "submit":
        builder = SparkSession.builder.appName("rmq-recon")
    else:  # pragma: no cover - guarded by the Literal
        raise ValueError(f"unknown engine {engine!r}")
    # A Connect builder's getOrCreate() would hand back any session already active in this process (and we
    # would stop it on exit); create() always opens our own.
    if engine == "sail":
        # PySpark's DataFrame debugging records the caller of every API call (a stack walk and a failing `import
        # IPython` each time): about 0.1 ms per call, 20 ms to build the replay's plan. Errors still name the
        # failing expression without it. A Spark server holds it as a static setting: only our own server here.
        builder = builder.config("spark.python.sql.dataFrameDebugging.enabled", "false")
    spark = builder.create() if engine in ("sail", "connect") else builder.getOrCreate()
    try:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        log.info("spark session on engine %s", engine)
        yield spark
    finally:
        spark.stop()
        if server is not None:
            server.stop()


def table_format() -> str:
    """The lake's table format: ``delta`` (default) or ``parquet`` for engines without Delta (``RMQ_RECON_FORMAT``)."""
    fmt = os.environ.get("RMQ_RECON_FORMAT", "delta").strip().lower()
    if fmt not in ("delta", "parquet"):
        raise ValueError(f"RMQ_RECON_FORMAT={fmt!r}: expected delta or parquet")
    return fmt


def materialize(spark: SparkSession, df: "DataFrame", path: str) -> "DataFrame":
    """Compute ``df`` once into Parquet at ``path`` and read it back.

    Sail (DataFusion) recomputes a frame at every place a plan uses it and ``cache()`` does not change that;
    a frame several reports (or several branches of one plan) read is written once instead. The caller owns
    ``path`` (and deletes it: ``jobs.storage.delete_tree``).
    """
    from jobs import storage

    df.write.mode("overwrite").parquet(path)
    if not any(k.endswith(".parquet") for k in storage.list_keys(path)):
        return spark.createDataFrame([], df.schema)
    return spark.read.schema(df.schema).parquet(path)
