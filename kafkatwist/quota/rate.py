"""
Kafka's sampled rate (C{org.apache.kafka.common.metrics.stats.Rate} over a
C{SampledStat}): C{quota.window.num} samples of C{quota.window.size.seconds}
each; the rate is their sum over the time they span, counted as at least
all but one full window so that a new client's first burst is measured
over the whole window, as Kafka measures it.

Not thread-safe: the quota manager holds a lock around it.
"""

from __future__ import annotations

__all__ = ["SampledRate", "SimpleRate"]


class _Sample:
    __slots__ = ("start", "value")

    def __init__(self, start: int) -> None:
        self.start = start
        self.value = 0.0

    def reset(self, start: int) -> None:
        self.start = start
        self.value = 0.0


class SampledRate:
    """
    @param samples: C{quota.window.num}.
    @param windowMs: C{quota.window.size.seconds} in milliseconds.
    """

    def __init__(self, samples: int, windowMs: int) -> None:
        self.numSamples = samples
        self.windowMs = windowMs
        self._samples: list[_Sample] = []
        self._current = 0
        #: when the last value was recorded (idle sensors are dropped)
        self.lastRecordMs = 0

    def record(self, value: float, nowMs: int) -> None:
        if not self._samples:
            self._samples.append(_Sample(nowMs))
            self._current = 0
        sample = self._samples[self._current]
        if nowMs - sample.start >= self.windowMs:
            self._current = (self._current + 1) % self.numSamples
            if self._current >= len(self._samples):
                self._samples.append(_Sample(nowMs))
            else:
                self._samples[self._current].reset(nowMs)
            sample = self._samples[self._current]
        sample.value += value
        self.lastRecordMs = nowMs

    def _purge(self, nowMs: int) -> None:
        expiry = self.numSamples * self.windowMs
        for sample in self._samples:
            if nowMs - sample.start >= expiry:
                sample.reset(nowMs)

    def windowSizeMs(self, nowMs: int) -> int:
        """
        The time the rate is measured over (Kafka's C{Rate.windowSize}).
        """
        self._purge(nowMs)
        oldest = min((s.start for s in self._samples), default=nowMs)
        elapsed = nowMs - oldest
        fullWindows = elapsed // self.windowMs
        if fullWindows < self.numSamples - 1:
            elapsed += (self.numSamples - 1 - fullWindows) * self.windowMs
        return elapsed

    def measure(self, nowMs: int) -> float:
        """
        @return: units per second.
        """
        windowMs = self.windowSizeMs(nowMs)
        total = sum(s.value for s in self._samples)
        return total / (windowMs / 1000.0) if windowMs > 0 else 0.0

    def throttleMs(self, bound: float, nowMs: int, maxMs: int) -> int:
        """
        How long the rate must stay silent to come back to C{bound} --
        Kafka's C{QuotaUtils.boundedThrottleTime}: C{(rate - bound) / bound}
        of the window the rate was measured over, at most C{maxMs}; 0
        within the bound.
        """
        rate = self.measure(nowMs)
        if rate <= bound:
            return 0
        if bound <= 0:
            return maxMs
        throttle = (rate - bound) / bound * self.windowSizeMs(nowMs)
        return int(round(min(throttle, maxMs)))


class SimpleRate(SampledRate):
    """
    Kafka's C{SimpleRate}, which replication throttles measure with: over
    the time since the oldest sample, at least one window (a first burst is
    not spread over the whole sampled time as L{SampledRate} spreads it).
    """

    def windowSizeMs(self, nowMs: int) -> int:
        self._purge(nowMs)
        oldest = min((s.start for s in self._samples), default=nowMs)
        return max(nowMs - oldest, self.windowMs)
