"""
Spark's workers run the driver's Python when PYSPARK_PYTHON is unset (by
default they run `python3` from the PATH, which usually lacks kafkatwist and
fails with "No module named 'kio'").
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .helpers import NO_JAVA, javaMissing

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         # the light JVM of tests/spark/conftest.py's session (client compiler, one GC thread)
         .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
         .getOrCreate())
import kafkatwist_spark
kafkatwist_spark.register(spark)
df = (spark.read.format("kafkatwist").option("kafka.bootstrap.servers", sys.argv[1])
      .option("subscribe", "worker-python").load())
print("rows", df.count())
spark.stop()
"""


def test_workers_run_the_drivers_python_when_pyspark_python_is_unset(kafka, tmp_path):
    if javaMissing():
        pytest.skip(NO_JAVA)
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic("worker-python", 1)])["worker-python"].result(30)
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(3):
        producer.produce("worker-python", b"%d" % i)
    assert producer.flush(30) == 0
    # A `python3` on the PATH that is not this one.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho 'not the driver python' >&2\nexit 3\n")
    (fake / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{fake}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([ROOT, os.path.join(ROOT, "spark")])
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, kafka.bootstrap], env=env, cwd=tmp_path,
        capture_output=True, text=True, timeout=300,
    )
    assert "rows 3" in result.stdout, result.stderr[-3000:]
