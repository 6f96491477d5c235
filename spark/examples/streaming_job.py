"""
A streaming job: the events pipeline as a stream that keeps a checkpoint.
Each run reads what arrived since the last one (up to
C{maxOffsetsPerTrigger} offsets per micro-batch), aggregates per kind and
5-minute window of event time, and appends the windows the watermark has
closed to a Parquet table.

    python spark/examples/streaming_job.py --bootstrap 127.0.0.1:9092 \\
        --topic demo-events --output /tmp/demo/stream --checkpoint /tmp/demo/checkpoint

Stop it and start it again with the same C{--checkpoint}: it goes on from
where it stopped, neither reading a record twice nor skipping one.
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from events_pipeline import events, windowed  # noqa: E402


def start(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    output: str,
    checkpoint: str,
    maxOffsetsPerTrigger: int = 5000,
    availableNow: bool = True,
) -> StreamingQuery:
    """
    Start the job.  With C{availableNow} it reads what is in the topic now,
    in micro-batches, and stops; otherwise it runs until stopped, every 2
    seconds.
    """
    raw = (
        spark.readStream.format("kafkatwist")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(maxOffsetsPerTrigger))
        .load()
    )
    # Append mode writes a window once the watermark passes its end: late
    # events up to 10 minutes behind the newest are still counted.
    result = windowed(events(raw).withWatermark("ts", "10 minutes"))
    writer = (
        result.writeStream.format("parquet")
        .outputMode("append")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .queryName("kafkatwist_events_stream")
    )
    if availableNow:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="2 seconds")
    return writer.start()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="demo-events")
    parser.add_argument("--output", default=os.path.join("demo-output", "stream"))
    parser.add_argument("--checkpoint", default=os.path.join("demo-output", "checkpoint"))
    parser.add_argument("--max-offsets-per-trigger", type=int, default=5000)
    parser.add_argument("--continuous", action="store_true",
                        help="keep running (every 2 s) instead of stopping when caught up")
    args = parser.parse_args(argv)

    from kafkatwist_spark import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.appName("kafkatwist-streaming-job").getOrCreate()
    register(spark)
    query = start(
        spark, args.bootstrap, args.topic, args.output, args.checkpoint,
        args.max_offsets_per_trigger, availableNow=not args.continuous,
    )
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
