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
from kafkatwist.testing.broker import TEST_DEFAULTS  # noqa: E402

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

    def withLogger(args, kwargs):
        if args and isinstance(args[0], dict):
            return ({"logger": logger, **args[0]},) + args[1:], kwargs
        kwargs.setdefault("logger", logger)
        return args, kwargs

    def quiet(cls):
        if getattr(cls, "_quiet", False):
            return cls
        try:
            # A Python class (AdminClient, whose __init__ names itself)
            original = cls.__init__

            def __init__(self, *args, **kwargs):
                args, kwargs = withLogger(args, kwargs)
                original(self, *args, **kwargs)

            cls.__init__ = __init__
            cls._quiet = True
            return cls
        except TypeError:
            pass

        class Quiet(cls):  # an extension type (Producer, Consumer)
            _quiet = True

            def __init__(self, *args, **kwargs):
                args, kwargs = withLogger(args, kwargs)
                super().__init__(*args, **kwargs)

        Quiet.__name__ = Quiet.__qualname__ = cls.__name__
        Quiet.__module__ = cls.__module__
        return Quiet

    for module, name in ((confluent_kafka, "Producer"), (confluent_kafka, "Consumer"),
                         (confluent_kafka.admin, "AdminClient")):
        setattr(module, name, quiet(getattr(module, name)))


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    return makePki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture
def brokerFactory(tmp_path):
    started = []

    def make(overrides=None, **kw):
        """
        A broker (not started) with L{TEST_DEFAULTS} under C{overrides}.
        """
        broker = Broker(str(tmp_path / f"broker{len(started)}"), {**TEST_DEFAULTS, **(overrides or {})}, **kw)
        started.append(broker)
        return broker

    yield make
    for broker in started:
        broker.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """
    One PLAINTEXT broker shared by a module's tests (L{TEST_DEFAULTS}).
    """
    b = Broker(str(tmp_path_factory.mktemp("broker")), dict(TEST_DEFAULTS))
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
