"""
The request handler pool's idle clock (Kafka's RequestHandlerAvgIdlePercent):
the time each handler thread waits for the RequestChannel, each wait over
the pool's size; the time it works is not counted.  Real threads, a real
channel; every wait is on a condition.
"""

import threading
import time

from kafkatwist.metrics.stats import HandlerIdle, IdleSlot
from kafkatwist.network.channel import RequestChannel
from kafkatwist.network.handlers import HandlerPool
from kafkatwist.testing import waitUntil


def test_a_finished_wait_and_one_in_progress_count_over_the_pool_size():
    idle = HandlerIdle()
    a, b = idle.slot(), idle.slot()
    a.state = (3.0, 0.0, 2)  # working, 3 s of waits so far
    b.state = (1.0, 100.0, 2)  # waiting since 100.0
    assert idle.seconds(now=104.0) == 3.0 + 1.0 + 4.0 / 2
    # A scrape whose clock reads before the wait began adds nothing.
    assert idle.seconds(now=99.0) == 4.0
    assert IdleSlot().state == (0.0, 0.0, 1)


def pool(threads: int):
    channel = RequestChannel(10)
    handlers = HandlerPool(channel, object(), threads)
    handlers.start()
    return channel, handlers


def stop(channel, handlers):
    channel.close(handlers.numThreads)
    assert handlers.join(10)


def test_time_spent_on_a_request_is_not_idle():
    channel, handlers = pool(1)
    try:
        idle = handlers.idle
        # Waiting: the clock runs.
        first = idle.seconds()
        waitUntil(lambda: idle.seconds() > first, what="the waiting handler's idle time growing")
        entered, release = threading.Event(), threading.Event()

        def work():
            entered.set()
            release.wait(30)

        channel.sendCall(work)
        assert entered.wait(30)
        # Working: the clock stands still, however long the work takes.
        busy = idle.seconds()
        assert idle.seconds() == busy
        assert 0 <= idle.ratio() <= 1
        release.set()
        waitUntil(lambda: idle.seconds() > busy, what="the handler waiting again")
    finally:
        release.set()
        stop(channel, handlers)


def test_pool_average_is_at_most_the_elapsed_time():
    """
    Two idle threads: each wait counts half, so the pool's idle seconds
    never run ahead of the clock, and the ratio stays a share.
    """
    channel, handlers = pool(2)
    try:
        idle = handlers.idle
        waitUntil(lambda: len(idle._slots) == 2, what="both handler threads waiting")
        for _ in range(3):
            now = time.monotonic()
            assert 0 < idle.seconds(now) <= now - idle.started
        assert 0 < idle.ratio() <= 1
    finally:
        stop(channel, handlers)
    # The threads ended: what they counted stays counted.
    assert idle.seconds() > 0
