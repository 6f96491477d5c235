"""
Issue 30: a follower never truncates to a leader that has less of its own
leader epoch than the follower (it lost its unflushed tail in a crash and
still leads in the same epoch): records of an epoch come only from its
leader, so what the follower holds beyond may be acknowledged.
"""

from __future__ import annotations

from kafkatwist.log.epochs import UNDEFINED_OFFSET
from kafkatwist.replication.fetcher import leaderLostData, truncationOffset


class Epochs:
    def __init__(self, entries):
        self.entries = entries  # [(epoch, startOffset)]

    @property
    def latestEpoch(self):
        return self.entries[-1][0]

    def endOffsetFor(self, epoch, logEnd):
        found = None
        for i, (e, _) in enumerate(self.entries):
            if e <= epoch:
                found = i
        if found is None:
            return -1, UNDEFINED_OFFSET
        e = self.entries[found][0]
        end = self.entries[found + 1][1] if found + 1 < len(self.entries) else logEnd
        return e, end


class Log:
    def __init__(self, entries, end, hw):
        self.epochs = Epochs(entries)
        self.logEndOffset = end
        self.highWatermark = hw


def test_a_leader_short_of_its_own_epoch_lost_data():
    follower = Log([(0, 0)], 1000, 1000)
    # The restarted leader still leads in epoch 0 with 500 records.
    assert leaderLostData(follower, 0, 0, 500)
    # ... where the plain rule would truncate to 500.
    assert truncationOffset(follower, 0, 500) == (500, True)


def test_a_new_leader_is_not_suspected():
    follower = Log([(0, 0)], 1000, 1000)
    # A leader in a newer epoch answers for the follower's epoch 0: the
    # ordinary divergence rule applies.
    assert not leaderLostData(follower, 1, 0, 1000)
    assert not leaderLostData(follower, 1, 0, 800)
    # The leader of the current epoch with as much or more of it.
    assert not leaderLostData(follower, 0, 0, 1000)
    assert not leaderLostData(follower, 0, 0, 1200)
    assert not leaderLostData(follower, 0, 0, UNDEFINED_OFFSET)
    # A follower with nothing of the current epoch.
    older = Log([(0, 0)], 1000, 1000)
    assert not leaderLostData(older, 2, 2, 1000)
