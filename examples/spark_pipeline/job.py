"""The Structured Streaming job: ``pages`` -> per-domain and word statistics.

Reads the ``pages`` topic through the ``nsq`` format, parses each body as
JSON, and for every micro-batch (``foreachBatch``):

* computes the pages per domain and the word statistics (words, words per
  page, the most frequent words);
* appends the per-domain statistics to Parquet under ``<out>/domain_stats``
  (partitioned by batch);
* publishes one JSON summary of the batch to the ``page_stats`` topic with
  the ``nsq`` batch sink.

The source writes a write-ahead log (``walLocation``), so a restarted query
replays a failed batch with the same pages; ``foreachBatch`` is not an
idempotent sink by itself, so the Parquet rows carry the batch id (a replay
appends the batch again under the same id) and the summary says which batch
it is.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

PAGE_SCHEMA = "url string, domain string, title string, text string, fetched_at double"


def build_stream(spark: SparkSession, nsqd: str, per_batch: int, wal: str) -> DataFrame:
    """The parsed ``pages`` stream: one row per page, with its nsq message id."""
    raw = (
        spark.readStream.format("nsq")
        .option("nsqdTcpAddresses", nsqd)
        .option("topic", "pages")
        .option("channel", "spark_stats")
        .option("walLocation", wal)
        .option("maxMessagesPerBatch", per_batch)
        .load()
    )
    page = F.from_json(F.col("body").cast("string"), PAGE_SCHEMA)
    return raw.select(F.col("id").alias("message_id"), page.alias("p")).select("message_id", "p.*")


def summarize_batch(
    spark: SparkSession, pages: DataFrame, batch_id: int, nsqd: str, out: str
) -> None:
    """foreachBatch: statistics to Parquet, one summary to ``page_stats``."""
    pages = pages.cache()
    try:
        count = pages.count()
        if count == 0:
            return
        words = pages.select("domain", F.explode(F.split("text", " ")).alias("word"))
        per_domain = (
            pages.groupBy("domain")
            .agg(F.count("*").alias("pages"), F.sum(F.size(F.split("text", " "))).alias("words"))
            .withColumn("batch", F.lit(batch_id))
        )
        per_domain.write.mode("append").partitionBy("batch").parquet(f"{out}/domain_stats")
        top = words.groupBy("word").count().orderBy(F.desc("count"), "word").limit(10)
        domains = {r["domain"]: r["pages"] for r in per_domain.collect()}
        total_words = sum(r["words"] for r in per_domain.collect())
        summary: dict[str, Any] = {
            "batch": batch_id,
            "pages": count,
            "words": total_words,
            "avg_words": total_words / count,
            "domains": domains,
            "top_words": [(r["word"], r["count"]) for r in top.collect()],
        }
        body = json.dumps(summary)
        (
            spark.createDataFrame([(body,)], "body string")
            .write.format("nsq")
            .option("nsqdTcpAddresses", nsqd)
            .option("topic", "page_stats")
            .mode("append")
            .save()
        )
    finally:
        pages.unpersist()


def start(
    spark: SparkSession, nsqd: str, out: str, per_batch: int = 1000, wal: str | None = None
) -> Any:
    """Start the job; returns the StreamingQuery (checkpoint under ``<out>/checkpoint``).

    The source's write-ahead log is ``wal`` (default ``<out>/wal``).
    """
    stream = build_stream(spark, nsqd, per_batch, wal or f"{out}/wal")
    return (
        stream.writeStream.foreachBatch(
            lambda df, batch_id: summarize_batch(spark, df, batch_id, nsqd, out)
        )
        .option("checkpointLocation", f"{out}/checkpoint")
        .queryName("page_stats")
        .start()
    )
