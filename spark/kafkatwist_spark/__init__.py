"""
kafkatwist's PySpark connector: a Python data source named C{kafkatwist}
that reads and writes Kafka topics over the wire protocol, with the schema
and options of Spark's own C{format("kafka")}.

    from kafkatwist_spark import register
    register(spark)            # or spark.dataSource.register(KafkaTwistDataSource)
    df = (spark.read.format("kafkatwist")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events")
          .load())

See C{spark/README.md} for the options.
"""

from __future__ import annotations

try:
    # Streaming read limits (maxOffsetsPerTrigger) and Trigger.AvailableNow
    # for Python data sources arrived in PySpark 4.2.
    from pyspark.sql.streaming.datasource import ReadMaxRows  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the installed PySpark
    raise ImportError(
        "kafkatwist_spark needs PySpark 4.2 or later and pyarrow: pip install 'kafkatwist[spark]'"
    ) from e

from kafkatwist_spark.options import OptionError
from kafkatwist_spark.offsets import DataLossError
from kafkatwist_spark.source import KafkaTwistDataSource, kafkaSchema

__all__ = ["DataLossError", "KafkaTwistDataSource", "OptionError", "kafkaSchema", "register"]


def register(spark) -> None:
    """
    Register the C{kafkatwist} format with C{spark}'s session.
    """
    spark.dataSource.register(KafkaTwistDataSource)
