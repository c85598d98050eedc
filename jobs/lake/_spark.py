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
from typing import TYPE_CHECKING, Callable, Iterator, Literal

from pyspark.sql import SparkSession

from jobs.lake import engine_config

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

Engine = Literal["sail", "connect", "classic", "submit"]
log = logging.getLogger(__name__)

RUST_LOG_DEFAULT = engine_config.RUST_LOG_DEFAULT
_QUIET_ACTOR = "sail_common::actor=error"


def rust_log(value: str | None) -> str:
    """Sail's log filter: the user's, with the notice Sail's actors log at every orderly shutdown ("aborting N
    task(s)") kept out unless the filter names that target itself. Airflow shows every stderr line of a task as an
    ERROR, so the notice looked like a failure in every task log."""
    if not value:
        return RUST_LOG_DEFAULT
    return value if "sail_common::actor" in value else f"{value},{_QUIET_ACTOR}"

# Sail's allocator (mimalloc, linked into pysail) kept the memory of finished queries: validating 10 M messages in
# eleven key-bucket queries grew the process ~50 MB per query (1.8 GiB peak). Returning freed pages at once holds it
# at 0.7 GiB at the same speed (ingest at scale 13: 25.6 s / 1.51 GiB -> 26.7 s / 1.22 GiB). Read by mimalloc when
# pysail is first imported; set them in the environment to choose otherwise.
MIMALLOC_DEFAULTS = {"MIMALLOC_PURGE_DELAY": "0", "MIMALLOC_PURGE_DECOMMITS": "1", "MIMALLOC_ARENA_EAGER_COMMIT": "0"}
# Sail's Parquet filter pushdown (late materialization: the columns a filter reads are decoded first, the others only
# for the rows that pass) stays off, as in Sail itself. pysail 0.7.2 (parquet-rs 59.2) fails on tables the ingest
# writes: with a hash join's dynamic filter pruning whole pages of one column and a second predicate read with a row
# mask, the scan asks for a page it never fetched ("Invalid offset in sparse column chunk data ... no matching page
# found"; apache/arrow-rs#9239, #9516, #10733). A plain ingest of `mixed --scale 13 --seed 2` failed every time at
# silver/deliveries (issue 33). Off, a horizon reconcile's look-ups of old records read every column of the hits'
# files (10 M records: 18.4 -> 26.3 s); an ingest and a full reconcile are unchanged. The smallest reproduction is
# tests/sail_pushdown_case.py (README "Known issues"); tests/test_sail_pushdown.py fails once an upgrade fixes it. Read
# when the server starts; the environment overrides it.
SAIL_DEFAULTS = {"SAIL_PARQUET__PUSHDOWN_FILTERS": "false"}

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
        os.environ["RUST_LOG"] = rust_log(os.environ.get("RUST_LOG"))
        for name, value in {**MIMALLOC_DEFAULTS, **SAIL_DEFAULTS}.items():
            os.environ.setdefault(name, value)
        from jobs.lake.engine_config import no_huge_pages

        no_huge_pages()  # (the CLI did already; a job started otherwise, by a test or a DAG task's own process)
        from pysail.spark import SparkConnectServer

        server = SparkConnectServer(ip="127.0.0.1", port=0)
        handlers = _signal_handlers()
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
    address = f"sc://{server.listening_address[0]}:{server.listening_address[1]}" if server is not None else (
        remote or os.environ.get("SPARK_REMOTE") or engine)
    try:
        spark = builder.create() if engine in ("sail", "connect") else builder.getOrCreate()
    except BaseException:
        _stop_server(server)
        raise
    try:
        if engine in ("sail", "connect"):
            _bound_retries(spark)
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        if server is not None:
            # The server answered a call, so it has registered its own Ctrl-C handling by now: take it back.
            _restore_signal_handlers(handlers)
        log.info("spark session on engine %s", engine)
        yield spark
    except Exception as exc:
        _let_go(spark, server)
        if _engine_lost(exc):
            raise EngineLost(f"the {engine} engine at {address} stopped answering ({_short(exc)}); check the engine "
                             "and its log, then rerun (the writes are idempotent)") from exc
        raise
    except BaseException:  # an interrupt: no goodbye to a server that may be gone, no waiting
        _let_go(spark, server)
        raise
    else:
        _let_go(spark, server, release=True)


def _signal_handlers() -> dict:
    import signal

    return {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore_signal_handlers(saved: dict) -> None:
    """Give SIGINT/SIGTERM back to Python: pysail's server takes SIGINT and shuts itself down, and the client then
    retried its calls to the dead server for minutes. Ours (the CLI's, or Airflow's in a task) stop the run and
    then the server, in that order."""
    import signal

    for sig, handler in saved.items():
        try:
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        except (ValueError, TypeError, OSError):  # not the main thread: nothing was taken from it either
            pass


class EngineLost(RuntimeError):
    """The Spark Connect server went away (killed, out of memory, network) while the run needed it."""


def engine_timeout_s() -> float:
    """How long a call may wait for a Spark Connect server that stopped answering (RMQ_RECON_ENGINE_TIMEOUT_S)."""
    return float(os.environ.get("RMQ_RECON_ENGINE_TIMEOUT_S", "120"))


def _bound_retries(spark: SparkSession) -> None:
    """Retry an unavailable server for about :func:`engine_timeout_s` in all, not the client's default 10 minutes."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    budget_ms, backoff, total, retries = engine_timeout_s() * 1000, 50.0, 0.0, 0
    while total + min(backoff, 15000) <= budget_ms and retries < 100:
        total += min(backoff, 15000)
        backoff *= 4
        retries += 1
    spark.client.set_retry_policies([DefaultPolicy(max_retries=retries, max_backoff=15000,
                                                   max_server_retry_delay=15000)])


def _run_bounded(fn: "object", seconds: float) -> None:
    import threading

    t = threading.Thread(target=fn, daemon=True)  # type: ignore[arg-type]
    t.start()
    t.join(seconds)


def _let_go(spark: SparkSession, server: "object | None", *, release: bool = False) -> None:
    """Stop the session, then the embedded server (in that order, or the process hangs at exit), each bounded.

    ``release``: say goodbye to the server (a normal end); after an error or an interrupt the server may be gone, and
    the client would retry the goodbye for minutes.
    """
    if not release:
        try:
            spark.release_session_on_close = False  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - classic sessions have no such flag
            pass
    _run_bounded(spark.stop, 20 if release else 3)
    _stop_server(server)


def _stop_server(server: "object | None") -> None:
    if server is not None:
        _run_bounded(server.stop, 5)  # type: ignore[attr-defined]


def _engine_lost(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}"
    return any(s in text for s in ("UNAVAILABLE", "RetriesExceeded", "Connection refused", "failed to connect",
                                   "Socket closed", "Connection reset"))


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    for marker in ("details = \"", "StatusCode."):
        if marker in text:
            text = text.split(marker, 1)[1].split('"', 1)[0]
            break
    return f"{type(exc).__name__}: {text[:200]}"


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
    ``path`` (and deletes it: ``jobs.lake.storage.delete_tree``).
    """
    from jobs.lake import storage

    df.write.mode("overwrite").parquet(path)
    if not any(k.endswith(".parquet") for k in storage.list_keys(path)):
        return spark.createDataFrame([], df.schema)
    return spark.read.schema(df.schema).parquet(path)


def materializer(spark: SparkSession, folder: str) -> "Callable[[DataFrame, str], DataFrame]":
    """``(df, name) -> df`` computed once into ``folder/name`` (:func:`materialize`), for transforms that take one."""
    return lambda df, name: materialize(spark, df, f"{folder.rstrip('/')}/{name}")
