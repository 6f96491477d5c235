"""
The request handler pool's idle clock (Kafka's RequestHandlerAvgIdlePercent):
the time each handler thread waits for the RequestChannel, each wait over
the pool's size; the time it works is not counted.  Real threads, a real
channel; every wait is on a condition.
"""

import threading

from kafkatwist.metrics.stats import HandlerIdle, IdleSlot
from kafkatwist.network.channel import RequestChannel
from kafkatwist.network.handlers import HandlerPool
from kafkatwist.testing import waitUntil


def test_finished_waits_and_one_in_progress():
    idle = HandlerIdle()
    a, b = idle.slot(), idle.slot()
    a.started = b.started = 90.0
    a.since, a.state = 95.0, (3.0, 95.0)  # working: its last wait is counted
    b.since, b.state = 100.0, (1.0, 96.0)  # waiting since 100.0
    assert idle.totals(now=104.0) == (3.0 + 1.0 + 4.0, 2 * 14.0)
    # A scrape whose clock reads before the wait began adds nothing of it.
    assert idle.totals(now=99.0)[0] == 4.0
    # An ended thread's time stops at its end.
    a.ended = 100.0
    assert idle.totals(now=104.0)[1] == 10.0 + 14.0
    fresh = IdleSlot(1.0)
    assert (fresh.state, fresh.since, fresh.ended) == ((0.0, 0.0), 0.0, 0.0)


def seconds(idle):
    return idle.totals()[0]


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
        first = seconds(idle)
        waitUntil(lambda: seconds(idle) > first, what="the waiting handler's idle time growing")
        entered, release = threading.Event(), threading.Event()

        def work():
            entered.set()
            release.wait(30)

        channel.sendCall(work)
        assert entered.wait(30)
        # Working: the clock stands still, however long the work takes.
        busy = seconds(idle)
        assert seconds(idle) == busy
        assert 0 <= idle.ratio() <= 1
        release.set()
        waitUntil(lambda: seconds(idle) > busy, what="the handler waiting again")
    finally:
        release.set()
        stop(channel, handlers)


def test_pool_idle_is_at_most_its_running_time():
    """
    Two idle threads: their waits never add up to more than the time they
    ran, and the ratio stays a share.
    """
    channel, handlers = pool(2)
    try:
        idle = handlers.idle
        waitUntil(lambda: len(idle._slots) == 2 and all(s.since for s in idle._slots),
                  what="both handler threads waiting")
        for _ in range(3):
            waited, ran = idle.totals()
            assert 0 < waited <= ran
        assert 0 < idle.ratio() <= 1
    finally:
        stop(channel, handlers)
    # The threads ended: what they counted stays counted, their time stops.
    waited, ran = idle.totals()
    assert 0 < waited <= ran == idle.totals()[1]
