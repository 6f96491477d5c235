"""
The shell around a sans-io coordinator: it owns the state machine, feeds it
inputs and performs its L{effects<kafkatwist.coordinator.effects>}.

Threads and ownership
=====================

  - The machine (every group, every offset) is owned by one
    L{SerialExecutor<kafkatwist.util.executor.SerialExecutor>}, the runtime's I{owner}: callables handed to it run one
    at a time, in the order handed, each on whichever thread found it idle
    (a request handler thread, or the coordinator's timer thread).  No
    locks guard group state; nothing else touches it.
  - Appends to a partition of the internal topic run on that partition's
    own L{SerialExecutor}, never on the owner: the owner hands the records
    over and moves on, and the append's outcome comes back to the owner as
    an input.  So no group waits for another group's disk write, and
    appends to one partition keep the order the machine emitted them in.
  - Answers (L{Respond}) are given after the owner's turn, outside it.
  - Timers run on the injected clock (a L{TimerThread<kafkatwist.util.timers.TimerThread>} in the broker, a
    C{task.Clock} in tests); a timer that fires hands its key to the owner.

A thread that hands work to an idle executor runs it itself, after what it
is already running (L{runHere<kafkatwist.util.executor.runHere>}): a heartbeat or an offset commit from a
handler thread is decided, appended and answered on that thread with no
thread switch, and the reactors never run coordinator work.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable

from twisted.internet.error import AlreadyCalled, AlreadyCancelled
from twisted.logger import Logger
from twisted.python.failure import Failure

from kafkatwist.coordinator.effects import Append, CancelTimer, Respond, SetTimer
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.util.executor import SerialExecutor, isRunningHere, runHere

__all__ = ["CoordinatorRuntime"]

log = Logger()
E = ErrorCode


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


def machineEntry(publish: bool = False) -> Callable[[Callable], Callable]:
    """
    The decorator of a sans-io machine's entry points, the methods the
    runtime feeds as C{method(nowMs, *args)}: set the machine's time,
    collect the effects its steps emit into C{self._fx} and return them.

    @param publish: also call the machine's C{_publish()} after each entry
        (what it shows other threads).
    """

    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def run(self, nowMs: int, *args, **kw):
            self.nowMs = nowMs
            fx: list = []
            self._fx = fx
            try:
                method(self, *args, **kw)
            finally:
                self._fx = None
                if publish:
                    self._publish()
            return fx

        return run

    return decorate


def _reply(replyTo: Callable, result) -> None:
    try:
        replyTo(result)
    except Exception:
        log.failure("answering {replyTo} failed", replyTo=replyTo)
