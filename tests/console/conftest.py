import pytest

from kafkatwist.testing import Broker
from kafkatwist.testing.broker import TEST_DEFAULTS
from tests.console.helpers import consolePort


@pytest.fixture(scope="module")
def consoleBroker(tmp_path_factory):
    """
    One PLAINTEXT broker with its HTTP listener, shared by a module's tests;
    C{.http} is the console's base URL.
    """
    b = Broker(str(tmp_path_factory.mktemp("console")),
               {**TEST_DEFAULTS, "metrics.http.listener": "127.0.0.1:0"})
    b.start()
    b.http = f"http://127.0.0.1:{consolePort(b)}"
    yield b
    b.stop()
