"""NSQ for Apache Spark: the ``nsq`` format of PySpark's Python Data Source API.

Install with ``pip install 'gnsqlite[spark]'`` (PySpark 4.2 or newer; Java 17).
Register the format once per SparkSession::

    from gnsqlite.spark import register
    register(spark)
    stream = (spark.readStream.format("nsq")
              .option("lookupdHttpAddresses", "127.0.0.1:4161")  # or nsqdTcpAddresses
              .option("topic", "pages").option("channel", "spark")
              .option("walLocation", "/shared/nsq-wal/pages")  # exactly-once
              .option("maxMessagesPerBatch", 100000)
              .load())   # id string, body binary, timestamp timestamp, attempts int,
                         # topic string, nsqd string
    df.write.format("nsq").option("nsqdTcpAddresses", "127.0.0.1:4150") \\
        .option("topic", "results").mode("append").save()
    stream_df.writeStream.format("nsq").option("nsqdTcpAddresses", "127.0.0.1:4150") \\
        .option("topic", "results").option("checkpointLocation", path).start()

The sink takes a ``body`` column (binary or string), an optional ``topic``
column (string; a null uses option ``topic``) and an optional ``defer``
column (seconds; published with DPUB). Every option, its default and unit
is in :data:`gnsqlite.spark.options.OPTIONS` (``describe_options()`` prints
the table); option names are case-insensitive; an unknown or invalid
option fails the query at start with an error naming it.

Guarantees
----------

Option ``readOn`` says where messages are consumed: ``driver`` (the
default: one Python process beside the driver, with or without a WAL) or
``executors``; each query logs one WARNING at start naming its mode and
guarantee.

**Source with ``readOn=executors`` (needs ``walLocation``): exactly-once
with an idempotent sink, ingest growing with the executors.** See
:mod:`gnsqlite.spark.executor_source`: the driver plans each batch from
nsqd's ``/stats`` (depth and in-flight count per nsqd) as shares, one
Spark partition each; every task subscribes to its nsqd, takes its share,
writes it as a segment named by (batch, partition) under ``walLocation``
(first writer wins; a loser gives its messages back) and FINishes only
once it is durable (:mod:`gnsqlite.spark.executor_read`). A partition read
again reads its segment; a redelivery already in a segment is FINished
and dropped.

**Source on the driver with option ``walLocation``: replayable,
exactly-once with an idempotent sink.** See :mod:`gnsqlite.spark.wal_source`: messages are
written to Arrow IPC segments under ``walLocation`` (through ``pyarrow.fs``)
and FINished once durable; offsets name segments and rows, so a re-planned
batch reads the same rows; ``walMaxBytes`` bounds the uncommitted WAL; a
storage failure fails the query naming the path.

**Source without ``walLocation``: at-least-once.**

* The source's :class:`~gnsqlite.consumer.Consumer` runs in its own thread
  with its own gevent hub inside the Python process Spark starts on the
  driver for the query's source, so heartbeats are answered and held
  messages are touched while Spark plans and runs batches.
* A message is FINished only after Spark committed the batch that carried
  it (the reader's ``commit(end)``). Spark commits batch N to the source
  only when it plans batch N+1, so the source holds up to two batches:
  ``maxInFlight`` (the RDY budget) defaults to ``2 x maxMessagesPerBatch``.
  nsqd caps RDY per connection (``--max-rdy-count``, 2500 by default), so
  the source opens ``connectionsPerNsqd`` connections to each nsqd (by
  default ``ceil(maxInFlight / 2500)``), each a client of the channel with
  its share of the budget.
* When Spark has planned every message handed out and nothing new arrived,
  the source issues one *flush* offset: Spark runs an empty batch and so
  commits the last real one. A query that has drained therefore leaves
  nothing in flight at nsqd.
* Held messages are touched before half of nsqd's ``msg_timeout`` has
  passed, also while the topic is idle. nsqd extends a message at most to
  its ``--max-msg-timeout`` (15 minutes by default): a batch that stays
  uncommitted longer is redelivered by nsqd and appears again.
* If the query fails or the driver dies before the commit, nsqd redelivers
  the messages (``attempts`` > 1). When a query **stops**, Spark ends the
  source's process with SIGTERM and closes its socket, in either order;
  the source turns that into a clean stop (its only process-wide change,
  made only if no SIGTERM handler is installed) and gives back (``REQ 0``)
  every message it holds before the process exits: the
  batches planned but not yet committed to the source (at least the last
  processed batch, since Spark commits it only when it plans the next one)
  are delivered again to the next run. A sink sees at most two batches
  twice per stop or failure; make it idempotent on ``id`` if duplicates
  matter. A process killed outright (SIGKILL) leaves its messages to
  nsqd's ``msg_timeout`` (option ``msgTimeout``).
* Offsets are ``{"session", "seq", "tick"}`` and carry no message id. A
  restarted query replays its last planned batch from the checkpoint; its
  offsets belong to the dead session, so it reads as empty and commits
  nothing: old ids are never resurrected from a checkpoint. The messages
  come back from nsqd instead, in new batches.
* ``Trigger.AvailableNow`` reads the messages nsqd received before the
  query started (by their nsqd timestamp) until no message arrived for
  ``availableNowIdleTimeout`` seconds, commits them all, and ends. Later
  messages are given back to nsqd.

**Sink: at-least-once.** An Arrow writer: MPUB bodies are cut from the
``body`` column's buffers. Each task publishes its rows with MPUB in chunks
within ``maxMessagesPerPublish``, ``maxBodySize`` and ``maxMessageSize``
(nsqd's ``--max-body-size``/``--max-msg-size``), keeps up to
``maxPendingPublishes`` MPUBs pipelined and waits for every ``OK`` before it
succeeds. A failed task is retried by Spark and may publish duplicates.
Tasks return commit messages with per-partition counts, which the driver
sums and logs (logger ``gnsqlite.spark.sink``). Connections are opened
lazily by the first task of an executor's Python worker, never by the
driver's planning objects, and are reused by the worker's later tasks.

**No monkey-patching.** The connector never patches anything in Spark's
processes; it uses gevent's own sockets in its own threads. An application
that monkey-patches must do so first thing, before it creates its
SparkSession.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register the ``nsq`` format with ``spark`` (a ``SparkSession``). Does not block."""
    from .datasource import NSQDataSource

    spark.dataSource.register(NSQDataSource)
