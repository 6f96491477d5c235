"""
Kafka's C{meta.properties}: which cluster (and node) a log directory
belongs to, in every directory of C{log.dirs}.

The first start writes it into every empty directory.  Later starts check
it as Kafka does and refuse to start, with one line naming the file, when a
directory that holds data has none (or an empty one), when it cannot be
read (binary, truncated, without C{cluster.id} or C{node.id}), when its
C{node.id} is not this broker's, or when the directories disagree: minting
a new cluster id for existing data would silently make it another
cluster's.
"""

from __future__ import annotations

import base64
import os
import uuid

from kafkatwist.util.atomic import TEMPORARY_SUFFIX, replaceFile
from kafkatwist.log.errors import StorageError
from kafkatwist.config import ConfigError
from kafkatwist.config import parseProperties

__all__ = ["META_PROPERTIES", "loadOrCreateClusterId", "storedClusterId"]

META_PROPERTIES = "meta.properties"
_VERSION = "1"
#: what may be in a log directory that holds no data yet
_NOT_DATA = {".lock", META_PROPERTIES, META_PROPERTIES + TEMPORARY_SUFFIX}
_REMEDY = (
    "restore it from a backup, or empty the directory to start afresh "
    "(the broker will not invent a cluster id for existing data)"
)


def storedClusterId(logDirs: list[str] | str, nodeId: int, configured: str | None = None) -> str | None:
    """
    The cluster id C{logDirs} hold, or C{None} while none has a
    C{meta.properties} yet; writes nothing (a broker checks its directory
    with it before it binds a port, and a cluster member learns the id
    from ZooKeeper before anything is written).

    @raise StorageError: as L{loadOrCreateClusterId}.
    @raise kafkatwist.config.ConfigError: as L{loadOrCreateClusterId}.
    """
    return _scan(logDirs, nodeId, configured)[0]


def loadOrCreateClusterId(
    logDirs: list[str] | str, nodeId: int, configured: str | None
) -> str:
    """
    The cluster id of C{logDirs}, written into those that do not have one
    yet.

    @param configured: C{cluster.id} from the configuration (in a cluster:
        ZooKeeper's), if set.
    @raise StorageError: a C{meta.properties} the broker refuses (see the
        module docstring).
    @raise kafkatwist.config.ConfigError: C{configured} differs from the
        stored id.
    """
    clusterId, missing = _scan(logDirs, nodeId, configured)
    if clusterId is None:
        clusterId = configured or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    for path in missing:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        content = f"#kafkatwist\nversion={_VERSION}\ncluster.id={clusterId}\nnode.id={nodeId}\n"
        replaceFile(path, content.encode("utf-8"))
    return clusterId


def _scan(logDirs: list[str] | str, nodeId: int, configured: str | None) -> tuple[str | None, list[str]]:
    """
    @return: the stored cluster id (or C{None}) and the C{meta.properties}
        paths still to write.
    """
    if isinstance(logDirs, str):
        logDirs = [logDirs]
    stored: dict[str, str] = {}
    missing = []
    for logDir in logDirs:
        path = os.path.join(logDir, META_PROPERTIES)
        properties = _read(path, nodeId)
        if properties is None:
            if _holdsData(logDir):
                raise StorageError(
                    path,
                    "missing or empty, but the directory holds data",
                    _REMEDY,
                )
            missing.append(path)
            continue
        stored[path] = properties["cluster.id"]
    clusterIds = set(stored.values())
    if len(clusterIds) > 1:
        path = sorted(stored)[-1]
        raise StorageError(
            path,
            f"cluster.id {stored[path]} differs from the other log directories' "
            f"({', '.join(sorted(clusterIds - {stored[path]}))})",
            "each directory of log.dirs must belong to the same cluster",
        )
    clusterId = clusterIds.pop() if clusterIds else None
    if configured and clusterId and configured != clusterId:
        raise ConfigError(
            "cluster.id", f"{configured} differs from {clusterId} in {sorted(stored)[0]}"
        )
    return clusterId, missing


def _holdsData(logDir: str) -> bool:
    try:
        return any(name not in _NOT_DATA for name in os.listdir(logDir))
    except FileNotFoundError:
        return False


def _read(path: str, nodeId: int) -> dict[str, str] | None:
    """
    @return: the properties, or C{None} if the file is missing or empty.
    @raise StorageError: the file is there but unusable.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StorageError(path, f"cannot be read ({e.strerror})", _REMEDY) from None
    if not raw:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise StorageError(path, "is not a properties file (binary content)", _REMEDY) from None
    if not text.endswith("\n") or "\x00" in text:
        raise StorageError(path, "is truncated or damaged", _REMEDY)

    properties = parseProperties(text, path)
    for key in ("version", "cluster.id", "node.id"):
        if not properties.get(key, "").strip():
            raise StorageError(path, f"has no {key}", _REMEDY)
    if properties["version"].strip() != _VERSION:
        raise StorageError(
            path, f"has version {properties['version']!r}, only {_VERSION} is known", _REMEDY
        )
    try:
        storedNode = int(properties["node.id"])
    except ValueError:
        raise StorageError(path, f"node.id {properties['node.id']!r} is not a number", _REMEDY) from None
    if storedNode != nodeId:
        # Kafka's check: another node's data must not be taken over.
        raise StorageError(
            path,
            f"belongs to node.id {storedNode}, but this broker is node.id {nodeId}",
            "set node.id to match, or use another log directory",
        )
    properties["cluster.id"] = properties["cluster.id"].strip()
    return properties
