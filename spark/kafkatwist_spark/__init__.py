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

import os
import sys

from kafkatwist_spark.options import OptionError
from kafkatwist_spark.offsets import DataLossError
from kafkatwist_spark.source import KafkaTwistDataSource, kafkaSchema

__all__ = ["DataLossError", "KafkaTwistDataSource", "OptionError", "kafkaSchema", "register", "useDriverPython"]


#: whether PYSPARK_PYTHON was set here (not by the user)
_chosen = False


def useDriverPython(sparkContext=None) -> None:
    """
    Spark's Python workers run C{PYSPARK_PYTHON}, C{python3} on the PATH
    when it is unset: usually not the interpreter (a venv) that has this
    package, and a read then fails in the worker with C{No module named
    'kio'}.  When C{PYSPARK_PYTHON} is unset, the workers run this driver's
    interpreter instead: set in the environment (for a SparkContext not yet
    started) and in the running context's configuration.
    """
    global _chosen
    if os.environ.get("PYSPARK_PYTHON") and not _chosen:
        return
    os.environ["PYSPARK_PYTHON"] = sys.executable
    _chosen = True
    if sparkContext is None:
        from pyspark import SparkContext

        sparkContext = SparkContext._active_spark_context
    if sparkContext is None:
        return
    try:
        sparkContext._conf.set("spark.pyspark.python", sys.executable)
        sparkContext.pythonExec = sys.executable
    except Exception:  # pragma: no cover - Spark Connect has no SparkContext here
        pass


useDriverPython()


def register(spark) -> None:
    """
    Register the C{kafkatwist} format with C{spark}'s session (and, unless
    C{PYSPARK_PYTHON} says otherwise, make its workers run this Python).
    """
    try:
        context = spark.sparkContext
    except Exception:  # pragma: no cover - Spark Connect
        context = None
    if context is not None:
        useDriverPython(context)
    spark.dataSource.register(KafkaTwistDataSource)
