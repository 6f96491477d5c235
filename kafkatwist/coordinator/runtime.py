"""
The shell around a sans-io coordinator: it owns the state machine, feeds it
inputs and performs its L{effects<kafkatwist.coordinator.effects>}.

Threads and ownership
=====================

  - The machine (every group, every offset) is owned by one
    L{SerialExecutor}, the runtime's I{owner}: callables handed to it run one
    at a time, in the order handed, each on whichever thread found it idle
    (a request handler thread, or the coordinator's timer thread).  No
    locks guard group state; nothing else touches it.
  - Appends to a partition of the internal topic run on that partition's
    own L{SerialExecutor}, never on the owner: the owner hands the records
    over and moves on, and the append's outcome comes back to the owner as
    an input.  So no group waits for another group's disk write, and
    appends to one partition keep the order the machine emitted them in.
  - Answers (L{Respond}) are given after the owner's turn, outside it.
  - Timers run on the injected clock (a L{TimerThread} in the broker, a
    C{task.Clock} in tests); a timer that fires hands its key to the owner.

A thread that hands work to an idle executor runs it itself, after what it
is already running (L{runHere}): a heartbeat or an offset commit from a
handler thread is decided, appended and answered on that thread with no
thread switch, and the reactors never run coordinator work.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable

from twisted.internet.error import AlreadyCalled, AlreadyCancelled
from twisted.logger import Logger
from twisted.python.failure import Failure

from kafkatwist.coordinator.effects import Append, CancelTimer, Respond, SetTimer
from kafkatwist.errors import ErrorCode, KafkaError

__all__ = ["CoordinatorRuntime", "SerialExecutor", "TimerThread", "runHere"]

log = Logger()
E = ErrorCode

_local = threading.local()


def runHere(work: Callable[[], object]) -> None:
    """
    Run C{work} on this thread: now, or -- if this thread is already
    running such work -- once that is done, so that nothing nests.
    """
    queue = getattr(_local, "queue", None)
    if queue is not None:
        queue.append(work)
        return
    queue = _local.queue = deque((work,))
    try:
        while queue:
            work = queue.popleft()
            try:
                work()
            except Exception:
                log.failure("coordinator work {work} failed", work=work)
    finally:
        _local.queue = None


def isRunningHere() -> bool:
    """
    Whether this thread is inside L{runHere} (waiting for other coordinator
    work here would deadlock).
    """
    return getattr(_local, "queue", None) is not None


class SerialExecutor:
    """
    Runs callables one at a time, in the order they were submitted, on
    whichever thread submitted to it while it was idle.

    @param perTurn: how many callables one turn runs before letting other
        work of the same thread run (C{None}: until empty).  An append queue
        takes one at a time, so a thread appending for one partition does
        not keep the owner's work waiting behind a run of disk writes.
    """

    def __init__(self, perTurn: int | None = None) -> None:
        self._lock = threading.Lock()
        self._queue: deque = deque()
        self._running = False
        self._perTurn = perTurn

    def submit(self, f: Callable, *args) -> None:
        """
        Run C{f(*args)} after everything submitted before.  Safe from any
        thread.
        """
        with self._lock:
            self._queue.append((f, args))
            if self._running:
                return
            self._running = True
        runHere(self._turn)

    def _turn(self) -> None:
        done = 0
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
                if self._perTurn is not None and done == self._perTurn:
                    break
                f, args = self._queue.popleft()
            try:
                f(*args)
            except Exception:
                log.failure("coordinator work {f} failed", f=f)
            done += 1
        runHere(self._turn)


class CoordinatorRuntime:
    """
    Performs a state machine's effects.

    @param machine: the sans-io coordinator; besides its request entry
        points it has C{timerFired(nowMs, key)} and
        C{appendCompleted(nowMs, token, error)}.
    @param clock: C{seconds()} (wall clock) and C{callLater(delay, f,
        *args)} returning a handle with C{cancel()}; its calls may come on
        any thread.
    @param coordinatorLog: the L{kafkatwist.interfaces.ICoordinatorLog}
        the machine's L{Append}s go to.
    """

    def __init__(self, machine, clock, coordinatorLog) -> None:
        self._machine = machine
        self._clock = clock
        self._log = coordinatorLog
        self._owner = SerialExecutor()
        # Owned by the owner:
        self._partitions: dict[int, SerialExecutor] = {}
        self._timers: dict = {}
        # Appends handed out and not yet performed (for shutdown).
        self._appendsLock = threading.Condition()
        self._appending = 0

    def nowMs(self) -> int:
        return int(self._clock.seconds() * 1000)

    # -- inputs ------------------------------------------------------------------

    def request(self, entry: Callable, replyTo: Callable, *args) -> None:
        """
        Hand C{entry(nowMs, replyTo, *args)} to the owner.  C{replyTo} is
        answered with a L{Failure} if the entry point raises.  Safe from
        any thread.
        """
        self._owner.submit(self._request, entry, replyTo, args)

    def input(self, entry: Callable, *args) -> None:
        """
        Hand C{entry(nowMs, *args)} to the owner.  Safe from any thread.
        """
        self._owner.submit(self._input, entry, args)

    def _request(self, entry, replyTo, args) -> None:
        try:
            effects = entry(self.nowMs(), replyTo, *args)
        except Exception:
            failure = Failure()
            log.failure("coordinator failed on {entry}", failure, entry=entry.__name__)
            runHere(functools.partial(replyTo, failure))
            return
        self._perform(effects)

    def _input(self, entry, args, nowMs: int | None = None) -> None:
        self._perform(entry(self.nowMs() if nowMs is None else nowMs, *args))

    # -- effects (on the owner) -----------------------------------------------

    def _perform(self, effects) -> None:
        for effect in effects:
            kind = type(effect)
            if kind is Respond:
                runHere(functools.partial(_reply, effect.replyTo, effect.result))
            elif kind is SetTimer:
                self._setTimer(effect.key, effect.delayMs)
            elif kind is CancelTimer:
                self._cancelTimer(effect.key)
            elif kind is Append:
                self._queueAppend(effect)
            else:
                raise TypeError(f"unknown effect {effect!r}")

    def _setTimer(self, key, delayMs: int) -> None:
        self._cancelTimer(key)
        token = object()
        handle = self._clock.callLater(delayMs / 1000.0, self._timerDue, key, token)
        self._timers[key] = (handle, self.nowMs() + delayMs, token)

    def _cancelTimer(self, key) -> None:
        armed = self._timers.pop(key, None)
        if armed is not None:
            try:
                armed[0].cancel()
            except (AlreadyCalled, AlreadyCancelled):
                # It fired and its hand-off to the owner is on its way; the
                # token check drops it.
                pass

    def _timerDue(self, key, token) -> None:
        # On the clock's thread.
        self._owner.submit(self._fire, key, token)

    def _fire(self, key, token) -> None:
        armed = self._timers.get(key)
        if armed is None or armed[2] is not token:
            return  # cancelled or re-armed since
        del self._timers[key]
        # Never earlier than asked, whatever the rounding.
        self._input(self._machine.timerFired, (key,), max(self.nowMs(), armed[1]))

    def _queueAppend(self, append: Append) -> None:
        queue = self._partitions.get(append.partition)
        if queue is None:
            queue = self._partitions[append.partition] = SerialExecutor(perTurn=1)
        with self._appendsLock:
            self._appending += 1
        queue.submit(self._append, append)

    #: C{awaitReplication(topic, partition, requiredOffset, onDone)}: calls
    #: C{onDone(error)} once the partition's ISR has everything below
    #: C{requiredOffset} (Kafka's coordinators append with acks=all); set
    #: by the broker, C{None} answers at once
    awaitReplication = None

    def _append(self, append: Append) -> None:
        # On the partition's executor, off the owner.
        info = None
        try:
            if append.producer is None and append.marker is None:
                info = self._log.append(append.partition, append.records)
            else:
                info = self._log.append(
                    append.partition, append.records, producer=append.producer,
                    marker=append.marker,
                )
            error = E.none
        except KafkaError as e:
            error = e.code
            log.warn(
                "append to {topic}-{partition} failed: {error}",
                topic=self._log.topic, partition=append.partition, error=e,
            )
        except OSError as e:
            error = E.kafka_storage_error
            log.error(
                "append to {topic}-{partition} failed: {error}",
                topic=self._log.topic, partition=append.partition, error=e,
            )
        except Exception:
            error = E.unknown_server_error
            log.failure(
                "append to {topic}-{partition} failed",
                topic=self._log.topic,
                partition=append.partition,
            )
        awaitReplication = self.awaitReplication
        if error == E.none and awaitReplication is not None and info is not None:
            awaitReplication(
                self._log.topic, append.partition, info.lastOffset + 1,
                lambda replicated: self._appended(append, replicated),
            )
            return
        self._appended(append, error)

    def _appended(self, append: Append, error) -> None:
        """
        The append is done (replicated, where the partition is): its outcome
        goes to the owner.  Any thread.
        """
        self.input(self._machine.appendCompleted, append.token, error)
        with self._appendsLock:
            self._appending -= 1
            self._appendsLock.notify_all()

    # -- lifecycle ------------------------------------------------------------

    def call(self, entry: Callable, *args, timeout: float = 30.0) -> None:
        """
        Run C{entry(nowMs, *args)} on the owner and wait until it ran: for
        start-up (loading) and shutdown, from a thread that runs no
        coordinator work.

        @raise TimeoutError: it did not run within C{timeout} seconds.
        """
        if isRunningHere():
            raise RuntimeError("cannot wait for the coordinator from its own work")
        done = threading.Event()
        failures: list[Failure] = []

        def run() -> None:
            try:
                self._input(entry, args)
            except Exception:
                failures.append(Failure())
            finally:
                done.set()

        self._owner.submit(run)
        if not done.wait(timeout):
            raise TimeoutError(f"the coordinator did not run {entry.__name__} in {timeout}s")
        if failures:
            failures[0].raiseException()

    def stop(self, entry: Callable, timeout: float = 10.0) -> None:
        """
        Give the machine its last input C{entry(nowMs)} (its shutdown),
        disarm every timer, then wait up to C{timeout} seconds for the
        appends it handed out, so the log can be closed after this returns.
        """
        deadline = time.monotonic() + timeout
        self.call(entry, timeout=timeout)
        self.call(lambda nowMs: [CancelTimer(key) for key in list(self._timers)], timeout=timeout)
        with self._appendsLock:
            while self._appending:
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warn(
                        "{count} coordinator appends still running at shutdown",
                        count=self._appending,
                    )
                    break
                self._appendsLock.wait(left)


def _reply(replyTo: Callable, result) -> None:
    try:
        replyTo(result)
    except Exception:
        log.failure("answering {replyTo} failed", replyTo=replyTo)


class _TimerCall:
    __slots__ = ("f", "args", "kw", "cancelled", "_clock")

    def __init__(self, clock, f, args, kw) -> None:
        self._clock = clock
        self.f, self.args, self.kw = f, args, kw
        self.cancelled = False

    def cancel(self) -> None:
        """
        Harmless after the call ran, from any thread.
        """
        if not self.cancelled:
            self.cancelled = True
            self._clock._cancelled()

    def active(self) -> bool:
        return not self.cancelled


class TimerThread:
    """
    The coordinators' clock: C{callLater} from any thread, calls run on
    this thread ("kafkatwist-<name>").  Not a reactor (there is no I/O to
    wait for), and apart from the reactors, so timers neither load a
    network thread nor wait for one.  C{seconds()} is wall time; delays are
    measured on the monotonic clock.
    """

    def __init__(self, name: str = "group-coordinator") -> None:
        self.name = f"kafkatwist-{name}"
        self._cond = threading.Condition()
        self._heap: list = []
        self._seq = itertools.count()
        self._garbage = 0
        self._stopping = False
        self._thread: threading.Thread | None = None

    def seconds(self) -> float:
        return time.time()

    def callLater(self, delay: float, f, *args, **kw) -> _TimerCall:
        call = _TimerCall(self, f, args, kw)
        when = time.monotonic() + max(delay, 0.0)
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._seq), call))
            if self._heap[0][2] is call:
                self._cond.notify()
        return call

    def _cancelled(self) -> None:
        with self._cond:
            self._garbage += 1
            if self._garbage > 1024 and self._garbage * 2 > len(self._heap):
                # Cancelled calls are dropped when they come due; when most
                # of the heap is such garbage, drop it now.
                self._heap = [entry for entry in self._heap if not entry[2].cancelled]
                heapq.heapify(self._heap)
                self._garbage = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        # Started in BrokerService.prepare(), before twistd daemonizes: a
        # forked child has no thread of ours, so it starts its own (without
        # this, a daemonized broker's group timers never fired).
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _restartAfterFork(ref))

    def _afterFork(self) -> None:
        if self._thread is None or self._stopping:
            return
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    if self._heap:
                        wait = self._heap[0][0] - time.monotonic()
                        if wait <= 0:
                            _, _, call = heapq.heappop(self._heap)
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
                if call.cancelled:
                    self._garbage = max(0, self._garbage - 1)
                    continue
                call.cancelled = True
            try:
                call.f(*call.args, **call.kw)
            except Exception:
                log.failure("timer {f} failed", f=call.f)


def _restartAfterFork(ref) -> None:
    timer = ref()
    if timer is not None:
        timer._afterFork()
