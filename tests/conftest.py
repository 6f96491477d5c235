"""
The project's fixtures.  Brokers, clusters and ZooKeeper come from
L{kafkatwist.testing} and its pytest plugin (C{kafkatwist_broker},
C{kafkatwist_cluster}, C{kafkatwist_zookeeper}, ...; docs/testing.md).
"""

import importlib.metadata
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "spark")):
    if path not in sys.path:
        sys.path.insert(0, path)

from kafkatwist.testing import Broker, makePki  # noqa: E402

# The plugin loads by its entry point once the package is installed; a
# checkout whose .venv predates the entry point loads it from here.
pytest_plugins = ["pytester"]
if not any(e.name == "kafkatwist" for e in importlib.metadata.entry_points(group="pytest11")):
    pytest_plugins.append("kafkatwist.testing.plugin")


def pytest_configure(config):
    quietLibrdkafka()


def quietLibrdkafka() -> None:
    """
    confluent-kafka's clients log through Python's logging (pytest shows it
    with a failure) instead of librdkafka writing to stderr from its own
    threads -- lines that landed in pytest's progress, between tests, from
    clients retrying brokers already stopped.
    """
    try:
        import confluent_kafka
        import confluent_kafka.admin
    except ImportError:
        return
    import logging

    logger = logging.getLogger("librdkafka")

    def quiet(cls):
        class Quiet(cls):
            def __init__(self, *args, **kwargs):
                if args and isinstance(args[0], dict):
                    args = ({"logger": logger, **args[0]},) + args[1:]
                else:
                    kwargs.setdefault("logger", logger)
                super().__init__(*args, **kwargs)

        Quiet.__name__ = Quiet.__qualname__ = cls.__name__
        Quiet.__module__ = cls.__module__
        return Quiet

    for module, name in ((confluent_kafka, "Producer"), (confluent_kafka, "Consumer"),
                         (confluent_kafka.admin, "AdminClient"), (confluent_kafka, "AdminClient")):
        cls = getattr(module, name, None)
        if cls is not None and not getattr(cls, "_quiet", False):
            quieter = quiet(cls)
            quieter._quiet = True
            setattr(module, name, quieter)


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    return makePki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture
def brokerFactory(tmp_path):
    started = []

    def make(overrides=None, **kw):
        broker = Broker(str(tmp_path / f"broker{len(started)}"), overrides, **kw)
        started.append(broker)
        return broker

    yield make
    for broker in started:
        broker.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """
    One PLAINTEXT broker shared by a module's tests.
    """
    b = Broker(str(tmp_path_factory.mktemp("broker")))
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def zookeeper(kafkatwist_zookeeper):
    """
    The session's ZooKeeper (L{kafkatwist.testing.ZooKeeper}); its
    C{connect(name)} gives each cluster a chroot of its own.
    """
    return kafkatwist_zookeeper
