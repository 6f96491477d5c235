"""
Fixtures for the Spark connector's tests: one local SparkSession and one
broker (PLAINTEXT and SSL listeners) for the whole session.  Without Java
the Spark tests skip; the tests that need neither Spark nor a broker still
run.
"""

import itertools
import os
import sys

import pytest

from kafkatwist.testing import Broker

from .helpers import NO_JAVA, javaMissing

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPARK_DIR = os.path.join(ROOT, "spark")


#: the hang bound of a Spark test (the suite's is 300 s): the first one a
#: process runs also starts its SparkSession (a JVM), which took 200 s of a
#: test's 300 on a 2-core machine with a load average of 30
SPARK_TIMEOUT = 600
HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if str(item.path).startswith(HERE + os.sep) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SPARK_TIMEOUT))


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """
    A local SparkSession, 2 cores, no UI, small shuffles, with the
    C{kafkatwist} format registered.
    """
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    if javaMissing():
        pytest.skip(NO_JAVA)
    # Python workers must run this interpreter (it has pyarrow) and import
    # this tree's kafkatwist and kafkatwist_spark, not an installed copy.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [ROOT, SPARK_DIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))

    from pyspark.sql import SparkSession

    from kafkatwist_spark import register

    scratch = tmp_path_factory.mktemp("spark")
    session = (
        # Two attempts per task (local[N, maxFailures]): a task that fails
        # once is run again, as on a cluster.
        SparkSession.builder.master("local[2,2]")
        .appName("kafkatwist-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        # A test JVM lives minutes on small data: the client compiler only
        # and one GC thread (about half the JVM's CPU for a start and a few
        # small jobs, measured on 2 cores).
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .config("spark.local.dir", str(scratch / "local"))
        .config("spark.sql.streaming.minBatchesToRetain", "10")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory, pki):
    """
    One broker for the session, listening on PLAINTEXT and SSL; tests keep
    out of each other's way with their own topics (see L{topic}).
    """
    broker = Broker(
        str(tmp_path_factory.mktemp("spark-broker")),
        {"ssl.keystore.location": pki.serverKeystore},
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
    )
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def admin(kafka):
    from kafkatwist.client import KafkaWireClient

    with KafkaWireClient(kafka.bootstrap) as client:
        yield client


_names = itertools.count()


@pytest.fixture
def newTopic(admin, request):
    """
    C{newTopic(partitions=4)}: create a topic named after the test.
    """

    def create(partitions: int = 4, prefix: str | None = None) -> str:
        base = prefix or request.node.name.split("[")[0].replace("test_", "")
        name = f"{base}-{next(_names)}"
        admin.createTopics({name: partitions})
        return name

    return create
