"""
What the broker-epoch (KIP-903) tests share: a replica manager's settings,
broker 2's registrations before and after its restart, and a fetcher that
fetches nothing.
"""

from __future__ import annotations

OLD, NEW = 0x100, 0x200  # broker 2's registrations (czxids) before and after its restart

CONFIG = {
    "replica.lag.time.max.ms": 10_000,
    "num.replica.fetchers": 1,
    "replica.high.watermark.checkpoint.interval.ms": 5000,
}


class NoFetcher:
    def __init__(self, *args, **kwargs):
        pass

    def addPartition(self, *args):
        pass

    def removePartition(self, key):
        pass

    def partitionCount(self):
        return 0

    def start(self):
        pass

    def stop(self, timeout=5.0):
        pass
