"""The writing side of the Spark sink, without Spark. Plain Python (no pyspark).

``write_batches`` produces the rows of one Spark task: each Arrow batch is encoded in bulk into
SEND_BATCH_MESSAGE bodies (``arrow_codec.encode_rows``) and sent with a few sends in flight; it returns
once the broker has acknowledged every message, so a task that succeeds has written all its rows and a
task that fails is retried by Spark (at-least-once). Every message carries the property
``SPARK_WRITE_KEY = <sinkId or query id>:<batchId>:<partition>:<seq>``, the same when a task or a
micro-batch is replayed, so a consumer can drop duplicates.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sluice.client.aio.producer import Producer
from sluice.client.message import SendResult
from sluice.spark.arrow_codec import chunk_records, encode_rows, split_by_topic, write_keys
from sluice.spark.options import SinkOptions
from sluice.spark.queue_client import LoopThread

log = logging.getLogger(__name__)

MAX_BATCH_BODY = 4 * 1024 * 1024 - 64 * 1024  # under the client's and broker's 4 MiB message limit


@dataclass(slots=True)
class WriteSummary:
    rows: int = 0
    sends: int = 0


def key_prefix(sink_id: str, batch_id: int | str, partition: int) -> str:
    """The first three fields of a write key: ``<sinkId>:<batchId>:<partition>``."""
    return f"{sink_id}:{batch_id}:{partition}"


def write_batches(opts: SinkOptions, batches: Iterable[pa.RecordBatch], prefix: str) -> WriteSummary:
    """Send every row of ``batches``; write keys are ``<prefix>:<seq>`` with seq counting rows from 0.

    Encoding runs in the calling thread while earlier sends are on the wire (a loop thread of their own).
    """
    thread = LoopThread("sluice-spark-sink")
    summary = WriteSummary()
    producer = Producer(opts.producer_group, namesrv=opts.namesrv, send_msg_timeout=opts.request_timeout_ms,
                        credentials=opts.access.credentials, tls=opts.access.tls_context())
    inflight: deque[concurrent.futures.Future[SendResult]] = deque()
    try:
        seq = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            for topic, rows, positions in split_by_topic(batch, opts.topic):
                records = encode_rows(rows, write_keys(prefix, seq + positions.astype(np.int64)))
                for chunk in chunk_records(records, topic, opts.send_batch_size, MAX_BATCH_BODY):
                    if not producer.started:  # an empty task never connects
                        thread.run(producer.start())
                    while len(inflight) >= opts.max_inflight_sends:
                        inflight.popleft().result()  # raises the send's error: Spark retries the task
                    inflight.append(thread.submit(producer.send_batch_body(chunk.topic, chunk.body)))
                    summary.sends += 1
                    summary.rows += chunk.count
            seq += batch.num_rows
        while inflight:
            inflight.popleft().result()
        return summary
    finally:
        for f in inflight:
            f.cancel()
        try:
            thread.run(producer.shutdown(), timeout=30)
        finally:
            thread.close()
