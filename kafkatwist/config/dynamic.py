"""
Dynamic broker configs (Kafka's C{DynamicBrokerConfig}): the keys the
registry marks dynamic (L{kafkatwist.config.Key.update}) set with
IncrementalAlterConfigs or AlterConfigs on a BROKER resource -- this
broker's id, or C{""} for the cluster-wide default -- and applied without a
restart.

Precedence, as Kafka's: a per-broker value over the cluster default over
C{server.properties}/C{--override} over the registry's default.  Both
dynamic layers are kept in C{kafkatwist-dynamic-broker-configs.json} in the
first data directory (L{kafkatwist.util.statefile}: written whole to a
temporary file, fsynced, renamed), written before a change is applied or
acknowledged, and applied at start-up.  A stored value that no longer
validates (a keystore file gone) is skipped with one log line.

In a cluster (C{zookeeper.connect}) the layers live in ZooKeeper instead,
in Kafka's layout: C{/config/brokers/<default>} and C{/config/brokers/<id>}
(L{kafkatwist.cluster.service.ClusterService.setBrokerConfigs}).  A change
is written there, applied here, and every other broker it concerns applies
it when its watch fires (L{DynamicBrokerConfig.storedChanged}); a broker
starts from what ZooKeeper holds.  Sensitive values (passwords) are never
written there: Kafka encrypts them with C{password.encoder.secret}, which
kafkatwist does not have, so they are refused with Kafka's error for a
broker without one.

Threads: L{DynamicBrokerConfig.alter} runs on request handler threads,
serialised by a lock; the reconfigurables it calls do their work there or
hand it to the thread that owns the state.  A change read from ZooKeeper
is handed by the cluster owner thread to L{DynamicBrokerConfig.handOff}
(the reactor's thread pool) in the order handed -- after a layer this broker
wrote, whose write was answered first -- and applies the latest one under the same
lock: the owner never waits for the lock, which an alter holds while it
waits for the owner to write ZooKeeper.  L{DynamicBrokerConfig.current} is
an immutable L{BrokerConfig} replaced whole: read it from any thread.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Mapping

from twisted.logger import Logger

from kafkatwist.config import (
    KEYS,
    LISTENER_SSL_KEYS,
    PER_BROKER,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    keySpec,
    listenerKey,
)
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.util.statefile import readRecords, storeRecords

__all__ = ["DYNAMIC_CONFIG_FILE", "DynamicBrokerConfig", "Reconfigurable"]

log = Logger()

DYNAMIC_CONFIG_FILE = "kafkatwist-dynamic-broker-configs.json"
_KIND = "dynamic-broker-configs"
_VERSION = 1
_SCOPES = {"broker": True, "default": False}


def _scala(names) -> str:
    # Kafka's messages print a Scala Set.
    return f"Set({', '.join(sorted(names))})"


class Reconfigurable:
    """
    Something that applies dynamic broker configs (Kafka's
    C{BrokerReconfigurable}).

    @ivar keys: the keys it applies; it is called when one of them changes.
    """

    keys: frozenset[str] = frozenset()

    def concerns(self, changed: set[str]) -> bool:
        return any(self._concerns(key) for key in changed)

    def _concerns(self, key: str) -> bool:
        return key in self.keys

    def validate(self, old: BrokerConfig, new: BrokerConfig) -> None:
        """
        @raise ConfigError: C{new} cannot be applied.
        """

    def reconfigure(self, old: BrokerConfig, new: BrokerConfig) -> None:
        """
        Apply C{new}.
        """


class DynamicBrokerConfig:
    """
    @param static: the settings of C{server.properties} and C{--override}.
    @param path: the file of the dynamic layers; C{None}: memory only.
    @ivar perBroker: this broker's dynamic configs (key -> text).
    @ivar clusterDefault: the cluster-wide dynamic defaults.
    """

    def __init__(self, static: BrokerConfig, path: str | None) -> None:
        self.static = static
        self.path = path
        self.perBroker: dict[str, str] = {}
        self.clusterDefault: dict[str, str] = {}
        self.current = static
        self._lock = threading.Lock()
        self._reconfigurables: list[Reconfigurable] = []
        #: in a cluster: C{remote(perBroker, layer, onDone)} writes a layer
        #: to ZooKeeper without waiting, C{onDone(error)} (a L{KafkaError} or
        #: C{None}) on any thread; C{None}: the file is the store
        self.remote: Callable[[bool, dict[str, str], Callable], None] | None = None
        #: a cluster broker's alters waiting for the one being written
        self._remoteAlters: deque = deque()
        self._remoteBusy = False
        self._remoteLock = threading.Lock()
        #: runs C{f()} off the caller's thread (in a cluster: the reactor's
        #: thread pool)
        self.handOff: Callable[[Callable[[], None]], None] = lambda f: f()
        #: what L{_inOrder} was given and has not run yet; the hand-off
        #: running it (one at a time) and its thread
        self._handed: deque = deque()
        self._handedLock = threading.Lock()
        self._handedRun = threading.Lock()
        self._handedRunner: int | None = None
        #: the latest layers read from ZooKeeper, not yet applied
        self._latest: tuple[dict[str, str], dict[str, str]] | None = None
        self._latestLock = threading.Lock()

    @classmethod
    def inDirectory(cls, static: BrokerConfig) -> DynamicBrokerConfig:
        return cls(static, os.path.join(static.logDirs[0], DYNAMIC_CONFIG_FILE))

    def addReconfigurable(self, reconfigurable: Reconfigurable) -> None:
        self._reconfigurables.append(reconfigurable)

    # -- reading -------------------------------------------------------------

    def load(self) -> None:
        """
        Read the stored layers (at start-up, once the data directory is
        ours) and make them current.  Nothing is reconfigured: what is built
        after this reads L{current}.

        @raise kafkatwist.util.statefile.StateFileError: not a file of
            this kind or version.
        """
        if not self.path:
            return
        layers: dict[bool, dict[str, str]] = {True: {}, False: {}}
        for record in readRecords(self.path, _KIND, _VERSION):
            scope, name, value = record.get("scope"), record.get("name"), record.get("value")
            if scope not in _SCOPES or not isinstance(name, str) or not isinstance(value, str):
                log.error("Skipping stored dynamic broker config {record} in {path}: {error}",
                          record=record, path=self.path, error="not a dynamic config record")
                continue
            if self._storable(name, value, _SCOPES[scope], self.path):
                layers[_SCOPES[scope]][name] = value
        self._adopt(layers[False], layers[True])

    def loadLayers(self, default: Mapping[str, str], broker: Mapping[str, str], where: str) -> None:
        """
        Make the layers read from ZooKeeper at start-up current (as L{load}
        does with the file's).
        """
        self._adopt(self._checked(default, False, where), self._checked(broker, True, where))

    def _checked(self, layer: Mapping[str, str], perBroker: bool, where: str) -> dict[str, str]:
        return {name: value for name, value in layer.items() if self._storable(name, value, perBroker, where)}

    def _storable(self, name: str, value: str, perBroker: bool, where: str) -> bool:
        """
        Whether a stored entry may be applied; one log line if not.
        """
        try:
            self._checkKeys({name}, perBroker)
            spec = keySpec(name)
            if self.remote is not None and spec is not None and spec.sensitive:
                # Kafka's is encrypted with its password.encoder.secret.
                raise ConfigError(name, "a password in ZooKeeper cannot be decoded without "
                                        "password.encoder.secret")
        except (ConfigError, KafkaError) as e:
            log.error("Skipping stored dynamic broker config {name}={value} in {where}: {error}",
                      name=name, value=_shown(name, value), where=where, error=e)
            return False
        return True

    def _adopt(self, default: dict[str, str], broker: dict[str, str]) -> None:
        self.clusterDefault, self.perBroker, self.current = self._resolve(default, broker)
        if self.clusterDefault or self.perBroker:
            log.info(
                "Dynamic broker configs applied: {broker} (this broker), {default} (cluster default)",
                broker=_showLayer(self.perBroker), default=_showLayer(self.clusterDefault),
            )

    def _resolve(self, default: dict[str, str], broker: dict[str, str]):
        """
        The layers without the stored values that no longer validate (a
        keystore file gone; one log line each), and the config they make.
        """
        layers = {False: dict(default), True: dict(broker)}
        while True:
            try:
                current = self._build(layers[False], layers[True])
                break
            except ConfigError as e:
                # A stored value that no longer validates: start without it.
                # The per-broker value first: the default's may be good.
                dropped = [
                    (perBroker, name)
                    for perBroker in (True, False)
                    for name in layers[perBroker]
                    if e.key in (name, (listenerKey(name) or ("", ""))[1])
                ][:1] or [(perBroker, name) for perBroker, layer in layers.items() for name in layer]
                for perBroker, name in dropped:
                    log.error("Not applying stored dynamic broker config {name}={value}: {error}",
                              name=name, value=_shown(name, layers[perBroker][name]), error=e)
                    del layers[perBroker][name]
        return layers[False], layers[True], current

    def storedChanged(self, default: Mapping[str, str], broker: Mapping[str, str]) -> None:
        """
        The layers as ZooKeeper holds them now (read on the cluster owner
        thread): what differs from the current ones is applied through the
        reconfigurables, off this thread (L{handOff}).
        """
        with self._latestLock:
            self._latest = (dict(default), dict(broker))
        self._inOrder(self._applyLatest)

    def _inOrder(self, work: Callable[[], None]) -> None:
        """
        Run C{work} through L{handOff} after everything given here before:
        a pool runs what it is given in any order, and a layer this broker
        wrote, applied after a newer change read from ZooKeeper, would
        undo that change.
        """
        with self._handedLock:
            self._handed.append(work)
        self.handOff(self._runHanded)

    def _runHanded(self) -> None:
        """
        Run what L{_inOrder} was given, first given first, until none is
        left (a later hand-off then finds nothing to do).
        """
        me = threading.get_ident()
        if self._handedRunner == me:
            return  # (handed from the work this thread runs: run after it)
        with self._handedRun:
            self._handedRunner = me
            try:
                while True:
                    with self._handedLock:
                        if not self._handed:
                            return
                        work = self._handed.popleft()
                    try:
                        work()
                    except Exception:
                        log.failure("Applying dynamic broker configs failed")
            finally:
                self._handedRunner = None

    def _applyLatest(self) -> None:
        with self._lock:
            with self._latestLock:
                latest, self._latest = self._latest, None
            if latest is None:
                return
            where = "ZooKeeper"
            default, broker = self._checked(latest[0], False, where), self._checked(latest[1], True, where)
            if default == self.clusterDefault and broker == self.perBroker:
                return
            old = self.current
            default, broker, new = self._resolve(default, broker)
            changed = _differing(self.clusterDefault, default) | _differing(self.perBroker, broker)
            try:
                for reconfigurable in self._reconfigurables:
                    if reconfigurable.concerns(changed):
                        reconfigurable.validate(old, new)
            except ConfigError as e:
                log.error("Not applying dynamic broker configs {layers} from ZooKeeper: {error}",
                          layers=_showLayer({**default, **broker}), error=e)
                return
            self.clusterDefault, self.perBroker, self.current = default, broker, new
            log.info("Dynamic broker configs from ZooKeeper: {broker} (this broker), "
                     "{default} (cluster default)", broker=_showLayer(broker), default=_showLayer(default))
            self._reconfigure(old, new, changed)

    def layer(self, perBroker: bool) -> dict[str, str]:
        return dict(self.perBroker if perBroker else self.clusterDefault)

    def layers(self) -> list[tuple[Mapping[str, str], ConfigSource]]:
        """
        Where a value may come from, highest precedence first (Kafka's
        synonym order): dynamic per broker, dynamic cluster default, static,
        the registry's default.
        """
        static = {name: self.static.raw[name] for name in self.static.explicit}
        defaults = {name: key.default for name, key in KEYS.items() if key.default is not None}
        return [
            (self.perBroker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.clusterDefault, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (static, ConfigSource.STATIC_BROKER_CONFIG),
            (defaults, ConfigSource.DEFAULT_CONFIG),
        ]

    # -- changing ------------------------------------------------------------

    def alter(
        self,
        perBroker: bool,
        change: Callable[[dict[str, str]], dict[str, str]],
        *,
        validateOnly: bool = False,
        onStored: Callable[[KafkaError | None], None] | None = None,
    ) -> None:
        """
        Replace one dynamic layer by C{change(layer)}, validated, stored,
        then applied.

        With the file as the store (one broker) this is done when it
        returns.  In a cluster the layer is written to ZooKeeper
        (L{remote}) without waiting for it: C{onStored(error)} is called
        once it was written and applied here (or not: C{error}), on the
        thread that answered or the hand-off's.  Alters of a cluster broker
        run one at a time, each from the layers the one before left; one
        queued behind another reports its errors to C{onStored} rather than
        raising them.

        @raise KafkaError: INVALID_REQUEST with Kafka's message (a key that
            is not dynamic, a bad value, a value that cannot be applied);
            KAFKA_STORAGE_ERROR when the file cannot be written.  Nothing
            changed.
        """
        if self.remote is None or validateOnly:
            with self._lock:
                old, layer, changed, default, broker, new = self._prepare(perBroker, change)
                if validateOnly:
                    return
                self._store(default, broker)
                self._apply(perBroker, old, layer, changed, default, broker, new)
            if onStored is not None:
                onStored(None)
            return
        with self._remoteLock:
            self._remoteAlters.append((perBroker, change, onStored or (lambda error: None)))
            if self._remoteBusy:
                return
            self._remoteBusy = True
        # The first in line: its errors are raised to the caller.
        self._nextRemote(raising=True)

    def _prepare(self, perBroker: bool, change):
        """
        The new layer and configuration, validated (under C{_lock}).
        """
        old = self.current
        layer = change(self.layer(perBroker))
        changed = _differing(self.layer(perBroker), layer)
        self._checkKeys(set(layer), perBroker)
        default = layer if not perBroker else self.clusterDefault
        broker = layer if perBroker else self.perBroker
        try:
            new = self._build(default, broker)
            for reconfigurable in self._reconfigurables:
                if reconfigurable.concerns(changed):
                    reconfigurable.validate(old, new)
        except ConfigError as e:
            raise KafkaError(ErrorCode.invalid_request, str(e)) from None
        return old, layer, changed, default, broker, new

    def _apply(self, perBroker, old, layer, changed, default, broker, new) -> None:
        self.clusterDefault, self.perBroker, self.current = dict(default), dict(broker), new
        log.info("Dynamic broker configs of {scope} now {layer}",
                 scope="this broker" if perBroker else "the cluster default", layer=_showLayer(layer))
        self._reconfigure(old, new, changed)

    def _nextRemote(self, raising: bool = False) -> None:
        """
        Write the next queued alter to ZooKeeper (a cluster broker).
        """
        while True:
            with self._remoteLock:
                if not self._remoteAlters:
                    self._remoteBusy = False
                    return
                perBroker, change, onStored = self._remoteAlters.popleft()
            try:
                with self._lock:
                    prepared = self._prepare(perBroker, change)
                    self._refusePasswords(perBroker, prepared[1], prepared[2])
            except Exception as e:
                # Whatever failed, the next alter in line runs (an
                # exception left here would keep every later one waiting).
                if raising:
                    self._nextRemote()
                    raise
                try:
                    onStored(_asKafkaError(e))
                except Exception:
                    # (Its failure must not keep the later alters waiting.)
                    log.failure("Answering a dynamic broker config change failed")
                continue
            break
        calling = threading.get_ident()
        layer = dict(prepared[1])
        answered = []

        def applied(error) -> None:
            try:
                if error is None:
                    with self._lock:
                        self._applyWritten(perBroker, layer)
            finally:
                try:
                    onStored(error)
                finally:
                    self._nextRemote()

        def stored(error) -> None:
            if answered:
                return  # answered once already
            answered.append(error)
            # On the thread ZooKeeper's answer came on (the cluster's
            # owner): applying reconfigures, which is the hand-off's work.
            if threading.get_ident() == calling:
                applied(error)
            else:
                self._inOrder(lambda: applied(error))

        remote = self.remote
        assert remote is not None
        try:
            remote(perBroker, layer, stored)
        except Exception as e:
            stored(_asKafkaError(e))

    def _applyWritten(self, perBroker: bool, layer: dict[str, str]) -> None:
        """
        Apply a layer this broker wrote to ZooKeeper (under C{_lock}) over
        the layers current now, not those it was prepared from: the other
        layer may have changed meanwhile (read from ZooKeeper), and that
        change stays.  Nothing to do when the watch already applied it.
        """
        old = self.current
        changed = _differing(self.layer(perBroker), layer)
        if not changed:
            return
        default = layer if not perBroker else self.clusterDefault
        broker = layer if perBroker else self.perBroker
        try:
            new = self._build(default, broker)
        except ConfigError as e:
            log.error("Not applying dynamic broker configs {layers} written to ZooKeeper: {error}",
                      layers=_showLayer({**default, **broker}), error=e)
            return
        self._apply(perBroker, old, layer, changed, default, broker, new)

    def _reconfigure(self, old: BrokerConfig, new: BrokerConfig, changed: set[str]) -> None:
        for reconfigurable in self._reconfigurables:
            if reconfigurable.concerns(changed):
                try:
                    reconfigurable.reconfigure(old, new)
                except Exception:
                    log.failure("Applying dynamic broker configs {keys} failed",
                                keys=", ".join(sorted(changed)))

    def _refusePasswords(self, perBroker: bool, layer: Mapping[str, str], changed: set[str]) -> None:
        """
        Kafka's answer for a password without C{password.encoder.secret}
        (C{DynamicBrokerConfig.toPersistentProps}): never written in plain
        text.

        @raise KafkaError: INVALID_REQUEST.
        """
        for name in sorted(changed):
            spec = keySpec(name)
            if name in layer and spec is not None and spec.sensitive:
                resource = str(self.static.nodeId) if perBroker else ""
                raise KafkaError(
                    ErrorCode.invalid_request,
                    f"Invalid config value for resource ConfigResource(type=BROKER, name='{resource}'): "
                    "Password encoder secret not configured",
                )

    def _build(self, default: Mapping[str, str], broker: Mapping[str, str]) -> BrokerConfig:
        raw = dict(self.static.raw)
        raw.update(default)
        raw.update(broker)
        return BrokerConfig(raw, warn=lambda message: None)

    def _checkKeys(self, names: set[str], perBroker: bool) -> None:
        """
        Kafka's checks of a dynamic layer, in its order and words.

        @raise KafkaError: INVALID_REQUEST.
        """
        specs = {name: keySpec(name) for name in names}
        static = {name for name, spec in specs.items() if spec is None or not spec.dynamic}
        if static:
            raise KafkaError(
                ErrorCode.invalid_request,
                f"Cannot update these configs dynamically: {_scala(static)}",
            )
        unprefixed = {name for name in names if name in LISTENER_SSL_KEYS}
        if unprefixed:
            raise KafkaError(
                ErrorCode.invalid_request,
                "These security configs can be dynamically updated only per-listener using the "
                f"listener prefix: {_scala(unprefixed)}",
            )
        if not perBroker:
            brokerOnly = {name for name, spec in specs.items() if spec.update == PER_BROKER}
            if brokerOnly:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    "Cannot update these configs at default cluster level, broker id must be "
                    f"specified: {_scala(brokerOnly)}",
                )
        listeners = {l.name for l in self.static.listeners}
        for name in specs:
            prefixed = listenerKey(name)
            if prefixed is not None and prefixed[0] not in listeners:
                raise KafkaError(ErrorCode.invalid_request, f"{name}: there is no listener {prefixed[0]}")

    def _store(self, default: Mapping[str, str], broker: Mapping[str, str]) -> None:
        if not self.path:
            return
        records = [
            {"scope": scope, "name": name, "value": value}
            for scope, layer in (("default", default), ("broker", broker))
            for name, value in sorted(layer.items())
        ]
        storeRecords(self.path, _KIND, _VERSION, records)


def _asKafkaError(e: Exception) -> KafkaError:
    if isinstance(e, KafkaError):
        return e
    return KafkaError(ErrorCode.unknown_server_error, f"{type(e).__name__}: {e}")


def _differing(old: Mapping[str, str], new: Mapping[str, str]) -> set[str]:
    return {name for name in set(old) | set(new) if old.get(name) != new.get(name)}


def _shown(name: str, value: str) -> str:
    spec = keySpec(name)
    return "[hidden]" if spec is not None and spec.sensitive else value


def _showLayer(layer: Mapping[str, str]) -> str:
    return ", ".join(f"{name}={_shown(name, value)}" for name, value in sorted(layer.items())) or "none"
