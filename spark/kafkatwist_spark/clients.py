"""
Wire clients for the connector, on the driver and on executors.

Spark reuses Python worker processes across tasks, so executors keep one
L{KafkaWireClient} per connection configuration (and thread) for the life of
the process: a task then starts fetching at once, without a new TCP and TLS
handshake, ApiVersions exchange and Metadata round trip.  The client
reconnects by itself after a broker drops a connection.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import threading

from kafkatwist.client import KafkaWireClient

from kafkatwist_spark.options import ConnectionConfig

__all__ = ["closeSharedClients", "discardSharedClient", "openClient", "sharedClient"]

_lock = threading.Lock()
_shared: dict[tuple[ConnectionConfig, int], KafkaWireClient] = {}
_pemDirectory: str | None = None
_pemFiles: dict[str, str] = {}


def _pemFile(text: str) -> str:
    """
    Write inline PEM text (C{kafka.ssl.*.certificates}, C{...key}) to a
    private file once per process: the TLS layer loads PEM from files.
    """
    global _pemDirectory
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    with _lock:
        path = _pemFiles.get(digest)
        if path is not None and os.path.exists(path):
            return path
        if _pemDirectory is None:
            _pemDirectory = tempfile.mkdtemp(prefix="kafkatwist-spark-pem-")
            atexit.register(shutil.rmtree, _pemDirectory, True)
        path = os.path.join(_pemDirectory, digest + ".pem")
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as f:
            f.write(text if text.endswith("\n") else text + "\n")
        _pemFiles[digest] = path
        return path


def openClient(config: ConnectionConfig) -> KafkaWireClient:
    """
    A new client for C{config}; the caller closes it.

    @raise KafkaConnectionError: if no bootstrap server answers.
    """
    cafile = config.cafile or (_pemFile(config.caPem) if config.caPem else None)
    certfile = config.certfile
    keyfile = config.keyfile
    if config.certPem:
        certfile = _pemFile(config.certPem)
        keyfile = _pemFile(config.keyPem) if config.keyPem else None
    return KafkaWireClient(
        config.bootstrapServers,
        clientId=config.clientId,
        securityProtocol=config.securityProtocol,
        sslCafile=cafile,
        sslCertfile=certfile,
        sslKeyfile=keyfile,
        sslPassword=config.keyPassword,
        sslCheckHostname=config.checkHostname,
        timeout=config.timeout,
    )


def sharedClient(config: ConnectionConfig) -> KafkaWireClient:
    """
    This process's (and thread's) client for C{config}, opened on first
    use.  Do not close it; call L{discardSharedClient} if it is broken.
    """
    key = (config, threading.get_ident())
    with _lock:
        client = _shared.get(key)
    if client is not None:
        return client
    client = openClient(config)
    with _lock:
        _shared[key] = client
    return client


def discardSharedClient(config: ConnectionConfig) -> None:
    """
    Close and forget this thread's client for C{config}: the next
    L{sharedClient} opens a fresh one (and re-reads cluster metadata).
    """
    with _lock:
        client = _shared.pop((config, threading.get_ident()), None)
    if client is not None:
        client.close()


def closeSharedClients() -> None:
    """
    Close every shared client of this process.
    """
    with _lock:
        clients = list(_shared.values())
        _shared.clear()
    for client in clients:
        try:
            client.close()
        except Exception:
            pass


atexit.register(closeSharedClients)
