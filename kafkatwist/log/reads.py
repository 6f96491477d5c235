"""
The read side of a partition log: consumers' and followers' reads (up to
the high watermark, the last stable offset with the aborted transactions
they overlap, or the log end), and the timestamp lookups of ListOffsets.

Reads take no lock (see L{kafkatwist.log.partition}): they run over the
published view, C{(bases, segments)}, and the published end,
C{(logEndOffset, activeSegment, activeSize)}.
"""

from __future__ import annotations

import os
from bisect import bisect_right

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.records import ReadInfo
from kafkatwist.protocol.batch import PREFIX, iterBatchHeaders

__all__ = ["PartitionReads"]


class PartitionReads:
    """
    The read path of L{kafkatwist.log.partition.PartitionLog} (its base
    class): everything here reads the published state the log's writers
    replace, C{_view}, C{_end}, C{_logStartOffset}, C{_highWatermark} and
    C{producerState}, and takes the log's C{_lock} only to wait for a
    cleaner's swap.
    """

    def _onView(self, operation):
        """
        C{operation(view)} over the published segments; again over the new
        ones if a segment it used vanished because the view was replaced
        (retention deleted it, or the cleaner swapped in its cleaned copy).

        @raise FileNotFoundError: a segment vanished without the view
            changing (the log was deleted).
        """
        while True:
            view = self._view
            try:
                return operation(view)
            except FileNotFoundError:
                # A cleaner swap removes the old segments' files before it
                # publishes the new view, all under the lock: wait for it.
                with self._lock:
                    if self._view is view:
                        raise

    def read(
        self,
        offset: int,
        maxBytes: int,
        minOneBatch: bool = True,
        readCommitted: bool = False,
        toLogEnd: bool = False,
        inline: int = 0,
    ) -> ReadInfo:
        """
        See L{IPartitionLog.read}.

        @param readCommitted: stop at the last stable offset, and report
            the aborted transactions the records overlap.
        @param toLogEnd: read up to the log end offset (a follower's fetch)
            rather than the high watermark (a consumer's).
        @param inline: records of at most this many bytes may come as
            C{bytes} rather than a file region (L{Segment.read}).
        """
        try:
            # Once over the published view (every fetch); only a segment
            # that vanished under the read takes the retrying way.
            return self._read(self._view, offset, maxBytes, minOneBatch, readCommitted, toLogEnd, inline)
        except FileNotFoundError:
            pass
        try:
            return self._onView(
                lambda view: self._read(
                    view, offset, maxBytes, minOneBatch, readCommitted, toLogEnd, inline
                )
            )
        except FileNotFoundError:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} was deleted from {self.topic}-{self.partition}",
            ) from None

    def _read(
        self,
        view,
        offset: int,
        maxBytes: int,
        minOneBatch: bool,
        readCommitted: bool = False,
        toLogEnd: bool = False,
        inline: int = 0,
    ) -> ReadInfo:
        # A cleaned log has gaps: the batch holding an offset may be gone,
        # and the read then starts at the next batch (in this segment or a
        # later one), as Kafka's does.
        logEndOffset, active, activeSize = self._end
        logStartOffset = self._logStartOffset
        highWatermark = self._highWatermark
        if highWatermark is None or highWatermark > logEndOffset:
            highWatermark = logEndOffset
        # After the end (see the module docs).
        first = self.producerState.firstUnstableOffset
        lastStable = (
            highWatermark if first is None or first >= highWatermark
            else max(first, logStartOffset)
        )
        if offset < logStartOffset or offset > logEndOffset:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} is outside [{logStartOffset}, {logEndOffset}] "
                f"of {self.topic}-{self.partition}",
            )
        limit = lastStable if readCommitted else logEndOffset if toLogEnd else highWatermark
        records = b""
        aborted = None
        if offset < limit:
            bases, segments = view
            if offset < bases[0]:
                raise KafkaError(
                    ErrorCode.offset_out_of_range,
                    f"offset {offset} was deleted from {self.topic}-{self.partition}",
                )
            i = bisect_right(bases, offset) - 1
            while i < len(segments):
                segment = segments[i]
                if segment.baseOffset >= limit:
                    break
                end = activeSize if segment is active else segment.size
                following = bases[i + 1] if i + 1 < len(bases) else logEndOffset
                endOffset = following
                if limit < following:
                    # Whole batches below the last stable offset only (it
                    # is the first offset of a batch).
                    end = segment.positionOf(limit, end)
                    endOffset = limit
                found = segment.read(offset, maxBytes, minOneBatch, end, inline)
                if found is not None:
                    records = found
                    if readCommitted and any(
                        getattr(s, "txnIndex", None) is not None for s in segments[i:]
                    ):
                        upper = _offsetAfter(found, end, endOffset)
                        aborted = self._collectAborted(view, i, offset, upper)
                    break
                if segment is active:
                    break
                i += 1
        if readCommitted and aborted is None:
            aborted = ()
        return ReadInfo(
            records=records,
            highWatermark=highWatermark,
            logStartOffset=logStartOffset,
            lastStableOffset=lastStable,
            abortedTransactions=aborted,
        )

    def _collectAborted(self, view, i: int, fetchOffset: int, upperBound: int) -> tuple:
        """
        Kafka's C{LocalLog.collectAbortedTransactions}: the aborted
        transactions overlapping C{[fetchOffset, upperBound)}, from the
        index of segment C{i} and the segments after it.
        """
        found = []
        for segment in view[1][i:]:
            # Set at load or by the writer before the LSO moved past it.
            index = getattr(segment, "txnIndex", None)
            if index is None:
                continue
            entries, complete = index.collect(fetchOffset, upperBound)
            found.extend(entries)
            if complete:
                break
        return tuple((entry.producerId, entry.firstOffset) for entry in found)

    def offsetForTimestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        try:
            return self._onView(lambda view: self._offsetForTimestamp(view, timestamp_ms))
        except FileNotFoundError:
            return None

    def _offsetForTimestamp(self, view, timestamp_ms: int) -> tuple[int, int] | None:
        logEndOffset, active, activeSize = self._end
        logStartOffset = self._logStartOffset
        for segment in view[1]:
            if segment is not active and segment.largestTimestamp < timestamp_ms:
                continue
            end = activeSize if segment is active else segment.size
            found = segment.findOffsetByTimestamp(timestamp_ms, end)
            if found is not None:
                offset, timestamp = found
                offset = max(offset, logStartOffset)
                if offset >= logEndOffset:
                    return None
                return offset, timestamp
            if segment is active:
                break
        return None

    def maxTimestamp(self) -> tuple[int, int] | None:
        try:
            best = self._onView(self._maxTimestamp)
        except FileNotFoundError:
            best = None
        if best is None:
            if self.logEndOffset == self.logStartOffset:
                return None
            # Batches without timestamps: Kafka answers with -1.
            return self.logEndOffset - 1, -1
        return best

    @staticmethod
    def _maxTimestamp(view) -> tuple[int, int] | None:
        best = None
        for segment in view[1]:
            timestamp = segment.largestTimestamp
            if timestamp >= 0 and (best is None or timestamp > best[1]):
                best = (segment.offsetOfLargestTimestamp, timestamp)
        return best


def _offsetAfter(records, end: int, endOffset: int) -> int:
    """
    The offset after the last batch of a read (its upper bound for the
    aborted-transaction index), cheaply: in-memory records are walked, a
    file region's next batch header is read (its base offset).

    @param end: the position the read could reach in its segment.
    @param endOffset: the offset at that position.
    """
    if isinstance(records, (bytes, bytearray, memoryview)):
        last = None
        for _, header in iterBatchHeaders(records):
            last = header
        return endOffset if last is None else last.baseOffset + last.lastOffsetDelta + 1
    after = records.position() + records.length
    if after >= end:
        return endOffset
    data = os.pread(records.fileno(), PREFIX.size, after)
    if len(data) < PREFIX.size:
        return endOffset
    return min(PREFIX.unpack_from(data, 0)[0], endOffset)
