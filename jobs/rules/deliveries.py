"""silver/deliveries from bronze/trace_records: who was handed which message, when, and how it ended.

A delivery is a SubBefore record; its SubAfter has the same requestId and msgId (docs/semantics.md rule 8).
The message is found by UNIQ_KEY (= the trace msgId) among the original copies (rule 7), and a broadcast
client by the trace message's born host (rule 9). Pure DataFrame transforms: no I/O, no clock.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from jobs.formats.topics import RETRY_PREFIX, is_system_topic_col
from schemas import deliveries as deliveries_schema


# The silver/messages columns :func:`deliveries` reads (a caller may pass just these).
MESSAGE_COLUMNS = ("cluster", "uniq_key", "topic", "broker", "physical_offset", "queue_id", "queue_offset", "store_ts",
                   "reconsume_times", "first_snapshot_ts")


def original_copies(messages: DataFrame) -> DataFrame:
    """One original stored copy per (cluster, UNIQ_KEY): the lowest (broker, physical_offset) one (rule 7; in one
    INNER_BATCH record, the lower queue offset)."""
    w = Window.partitionBy("cluster", "uniq_key").orderBy("broker", "physical_offset", "queue_offset")
    return (
        messages.where(F.col("uniq_key").isNotNull() & ~is_system_topic_col(F.col("topic")))
        .withColumn("_rn", F.row_number().over(w))
        .where("_rn = 1")
        .select("cluster", "uniq_key", "topic", "broker", "queue_id", "queue_offset")
    )


def client_host(client_id: str | None) -> str | None:
    """The IP a client id starts with, written as a trace's born host is (rule 9): RocketMQ names an IPv6 client
    ``[2001:db8:0:0:0:0:0:5]@instance`` (``NetworkUtil.normalizeHostAddress``: brackets, Java's uncompressed
    text), the born host is decoded to ``2001:db8::5``."""
    if client_id is None:
        return None
    ip = client_id.split("@", 1)[0]
    if ip.startswith("[") and ip.endswith("]"):
        import ipaddress

        try:
            return ipaddress.IPv6Address(ip[1:-1].split("%", 1)[0]).compressed
        except ValueError:
            return ip
    return ip


def sub_afters(trace: DataFrame) -> DataFrame:
    """The first SubAfter per (cluster, request_id, msg_id)."""
    w = Window.partitionBy("cluster", "request_id", "msg_id").orderBy("broker", "physical_offset", "record_index")
    return (
        trace.where("type = 'SubAfter'")
        .withColumn("_rn", F.row_number().over(w))
        .where("_rn = 1")
        .select("cluster", "request_id", "msg_id", F.col("group").alias("after_group"),
                F.col("success"), F.col("context_code"), F.col("cost_time_ms").alias("after_cost"),
                F.col("timestamp").alias("after_ts"), F.col("first_snapshot_ts").alias("after_snapshot_ts"))
    )


def with_sent_back(picked: DataFrame, messages: DataFrame) -> DataFrame:
    """``sent_back_ts`` / ``sent_back_snapshot_ts`` of the deliveries without a SubAfter (rule 12a): the earliest
    copy of the key in the group's ``%RETRY%`` topic with one more reconsume time, stored after the delivery started.

    ``ProcessQueue.cleanExpiredMsg`` (formats §3) sends a message consumed for longer than consumeTimeout back with
    delay level 3 and removes it from the ProcessQueue: the commit moves past it then. A failed consumption is sent
    back too, but only after its SubAfter (the hook runs before processConsumeResult), so a delivery with a SubAfter
    gets none; a send-back that failed leaves no copy, and the message keeps pinning (rule 20).
    """
    backs = (messages.where(F.col("topic").startswith(RETRY_PREFIX))
             .select(F.col("cluster").alias("_b_cluster"),
                     F.expr(f"substring(topic, {len(RETRY_PREFIX) + 1})").alias("_b_group"),
                     F.col("uniq_key").alias("_b_key"), F.col("reconsume_times").alias("_b_times"),
                     F.col("store_ts").alias("_b_ts"), F.col("first_snapshot_ts").alias("_b_snap")))
    cond = ((F.col("cluster") == F.col("_b_cluster")) & (F.col("consumer_group") == F.col("_b_group"))
            & (F.col("msg_id") == F.col("_b_key")) & (F.col("_b_times") == F.col("retry_times") + 1)
            & (F.col("_b_ts") > F.col("start_ts")) & F.col("success").isNull())
    w = Window.partitionBy("cluster", "consumer_group", "request_id", "msg_id").orderBy(F.col("_b_ts").asc_nulls_last())
    return (picked.join(backs, on=cond, how="left")
            .withColumn("_first_back", F.row_number().over(w)).where("_first_back = 1")
            .select("*", F.col("_b_ts").alias("sent_back_ts"), F.col("_b_snap").alias("sent_back_snapshot_ts"))
            .drop("_first_back", "_b_cluster", "_b_group", "_b_key", "_b_times", "_b_ts", "_b_snap"))


def deliveries(trace: DataFrame, messages: DataFrame, client_ids: DataFrame) -> DataFrame:
    """Deliveries with the schemas/deliveries.py columns.

    Args:
        trace: bronze/trace_records.
        messages: silver/messages (its MESSAGE_COLUMNS suffice).
        client_ids: (cluster, consumer_group, client_id) of broadcast clients seen in offsets.json files.
    """
    before = (
        trace.where("type = 'SubBefore'")
        .select("cluster", F.col("group").alias("consumer_group"), "request_id", "msg_id", "retry_times",
                F.col("timestamp").alias("start_ts"), "client_host", F.col("broker").alias("trace_broker"),
                F.col("physical_offset").alias("trace_physical_offset"), "record_index", "first_snapshot_ts")
    )
    # A batch context shares one requestId: keep every message, and keep the key unique.
    wb = Window.partitionBy("cluster", "consumer_group", "request_id", "msg_id").orderBy(
        "trace_broker", "trace_physical_offset", "record_index")
    before = before.withColumn("_dup", F.row_number().over(wb)).where("_dup = 1").drop("_dup")
    wr = Window.partitionBy("cluster", "consumer_group", "request_id").orderBy("msg_id")
    before = before.withColumn("_n", F.row_number().over(wr))

    after = sub_afters(trace)
    a = after.withColumnRenamed("cluster", "a_cluster").withColumnRenamed("request_id", "a_request_id") \
        .withColumnRenamed("msg_id", "a_msg_id")
    joined = before.join(
        a,
        on=(F.col("cluster") == F.col("a_cluster")) & (F.col("request_id") == F.col("a_request_id"))
        & (F.col("msg_id") == F.col("a_msg_id"))
        & (F.col("after_group").isNull() | (F.col("after_group") == F.col("consumer_group"))),
        how="left",
    ).drop("a_cluster", "a_request_id", "a_msg_id")
    end_ts = F.when(
        F.col("success").isNotNull(),
        F.coalesce(F.col("after_ts"),
                   F.timestamp_millis(F.unix_millis("start_ts") + F.coalesce(F.col("after_cost"), F.lit(0)))),
    )
    orig = original_copies(messages).withColumnRenamed("uniq_key", "msg_id")
    clients = (client_ids.select("cluster", "consumer_group", "client_id").distinct()
               # (a lambda: the function's type hints would make Spark Connect guess a pandas UDF)
               .withColumn("_host", F.udf(lambda c: client_host(c), "string")(F.col("client_id"))))
    with_msg = joined.join(orig, on=["cluster", "msg_id"], how="left")
    cand = with_msg.alias("d").join(
        clients.alias("c"),
        on=(F.col("d.cluster") == F.col("c.cluster")) & (F.col("d.consumer_group") == F.col("c.consumer_group"))
        & (F.col("c._host") == F.col("d.client_host")),
        how="left",
    ).select("d.*", F.col("c.client_id").alias("_client"))
    wc = Window.partitionBy("cluster", "consumer_group", "request_id", "msg_id").orderBy(F.col("_client").asc_nulls_last())
    picked = with_sent_back(cand.withColumn("_rc", F.row_number().over(wc)).where("_rc = 1"), messages)
    request_id = F.when(F.col("_n") == 1, F.col("request_id")).otherwise(
        F.concat(F.col("request_id"), F.lit("#"), F.col("msg_id")))
    out = picked.select(
        "cluster", "consumer_group", request_id.alias("request_id"), F.col("msg_id").alias("uniq_key"),
        "retry_times", "start_ts", end_ts.alias("end_ts"), "success", "context_code", "topic", "broker", "queue_id",
        "queue_offset", "client_host", F.coalesce(F.col("_client"), F.lit("")).alias("client_id"),
        F.col("after_cost").cast("long").alias("cost_time_ms"), "trace_broker", "trace_physical_offset",
        "first_snapshot_ts", "after_snapshot_ts", "sent_back_ts", "sent_back_snapshot_ts",
    )
    schema = deliveries_schema.SCHEMA
    return out.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])
