"""
The request histograms a Processor keeps: each phase's value lands in the
bucket bisect_left(BUCKETS, value) names, as Prometheus' "le" buckets
read (a value equal to a bound counts in that bound's bucket).
"""

import bisect
import random

from kafkatwist.metrics.stats import BUCKETS, PHASES, RequestStats


class Header:
    apiKey = 0


class Timed:
    header = Header()

    def __init__(self, received, dequeued, completed):
        self.receivedAt, self.dequeuedAt, self.completedAt = received, dequeued, completed


def test_every_phase_lands_in_the_bisect_bucket():
    rng = random.Random(29)
    values = list(BUCKETS) + [0.0, 1e-9, 10.0] + [b * f for b in BUCKETS for f in (0.999999, 1.000001)]
    values += [rng.uniform(0, 0.02) for _ in range(500)] + [rng.uniform(0, 6) for _ in range(100)]
    stats = RequestStats()
    expected = [[0] * (len(BUCKETS) + 1) for _ in PHASES]
    for v in values:
        # every phase takes v: received 0, dequeued v, completed 2v, picked
        # up 3v, sent 4v (the total is 4v)
        stats.record(Timed(1.0, 1.0 + v, 1.0 + 2 * v), 1.0 + 3 * v, 1.0 + 4 * v)
        for phase in range(4):
            measured = [(1.0 + v) - 1.0, (1.0 + 2 * v) - (1.0 + v), (1.0 + 3 * v) - (1.0 + 2 * v),
                        (1.0 + 4 * v) - (1.0 + 3 * v)][phase]
            expected[phase][bisect.bisect_left(BUCKETS, measured)] += 1
        expected[4][bisect.bisect_left(BUCKETS, (1.0 + 4 * v) - 1.0)] += 1
    assert [h.counts for h in stats.phases[0]] == expected
    assert stats.requests[0] == len(values)
