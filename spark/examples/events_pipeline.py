"""
A batch pipeline: read a topic of JSON events, count and sum them per kind
in 5-minute windows of event time, write the result as Parquet.

    python spark/examples/events_pipeline.py --bootstrap 127.0.0.1:9092 \\
        --topic demo-events --output /tmp/demo/windows

Events look like C{{"ts": "2024-05-01T12:00:03Z", "user": "u17", "kind":
"click", "amount": 1.5}}; see C{run_demo.py}, which produces some.
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StringType, StructField, StructType, TimestampType

EVENT_SCHEMA = StructType(
    [
        StructField("ts", TimestampType()),
        StructField("user", StringType()),
        StructField("kind", StringType()),
        StructField("amount", DoubleType()),
    ]
)


def events(raw: DataFrame) -> DataFrame:
    """
    Kafka rows (the kafkatwist schema) to typed events; the Kafka offset
    comes along so that every event can be traced back to its record.
    """
    parsed = F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("event")
    return raw.select(parsed, "partition", "offset").select("event.*", "partition", "offset")


def windowed(events: DataFrame, window: str = "5 minutes") -> DataFrame:
    """
    Events per kind and window of event time, with their total amount.
    """
    return (
        events.groupBy(F.window("ts", window).alias("window"), "kind")
        .agg(F.count("*").alias("events"), F.round(F.sum("amount"), 2).alias("amount"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "kind",
            "events",
            "amount",
        )
    )


def run(spark: SparkSession, bootstrap: str, topic: str, output: str) -> DataFrame:
    raw = (
        spark.read.format("kafkatwist")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    result = windowed(events(raw))
    result.write.mode("overwrite").parquet(output)
    return spark.read.parquet(output)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="demo-events")
    parser.add_argument("--output", default=os.path.join("demo-output", "windows"))
    args = parser.parse_args(argv)

    from kafkatwist_spark import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.appName("kafkatwist-events-pipeline").getOrCreate()
    register(spark)
    result = run(spark, args.bootstrap, args.topic, args.output)
    result.orderBy("window_start", "kind").show(20, truncate=False)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
