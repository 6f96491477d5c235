"""
LogThrottle: the first lines of a kind per client through, the rest counted.
"""

from kafkatwist.util.logthrottle import LogThrottle


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def collect(throttle, key, count):
    lines = []
    for i in range(count):
        throttle.emit(lambda fmt, **kw: lines.append(fmt.format(**kw)), key, "line {i}", i=i)
    return lines


def test_burst_then_silence_then_a_count():
    clock = FakeClock()
    throttle = LogThrottle(burst=3, interval=10.0, clock=clock)
    assert collect(throttle, ("closed", "10.0.0.1"), 50) == [
        "line 0", "line 1", "line 2 (more like this in the next 10 s are not logged)",
    ]
    # Another client, or another kind of line, has its own allowance.
    assert collect(throttle, ("closed", "10.0.0.2"), 1) == ["line 0"]
    assert collect(throttle, ("opened", "10.0.0.1"), 1) == ["line 0"]
    clock.now += 10
    assert collect(throttle, ("closed", "10.0.0.1"), 1) == [
        "line 0 (47 more like this were not logged)",
    ]
    clock.now += 10
    assert collect(throttle, ("closed", "10.0.0.1"), 1) == ["line 0"]


def test_keys_are_bounded():
    clock = FakeClock()
    throttle = LogThrottle(burst=1, interval=1.0, clock=clock, maxKeys=10)
    for i in range(10):
        throttle.check(("opened", i))
    clock.now += 2
    throttle.check(("opened", "new"))
    assert len(throttle._windows) == 1
