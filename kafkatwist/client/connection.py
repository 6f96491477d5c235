"""
One blocking connection to one broker: TCP (optionally TLS through
pyOpenSSL), Kafka framing, correlation ids, and the ApiVersions handshake
that decides which version of each API this connection speaks.

Blocking sockets keep the client usable from plain threads (the Spark
connector's executors, pytest) without a reactor.
"""

from __future__ import annotations

import ipaddress
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kafkatwist import __version__
from kafkatwist.errors import KafkaError
from kafkatwist.protocol.apis import API_VERSIONS, knownVersions, requestType
from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
from kafkatwist.protocol.entities import make

__all__ = [
    "APIVERSIONS_START",
    "BrokerConnection",
    "KafkaConnectionError",
    "TLSSettings",
    "TLSVerificationError",
    "pickVersion",
]

_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")

#: the ApiVersions version a connection tries first (as the Java client does)
APIVERSIONS_START = 3

#: refuse response frames larger than this: a size this big is garbage
#: (e.g. a TLS alert read as plaintext), not something to allocate
_MAX_FRAME = 1 << 30

_SOFTWARE_NAME = "kafkatwist"


def responseError(value: int) -> ErrorCode:
    """
    The L{ErrorCode} of a response's error field; a code this client does
    not know (a newer broker's) is UNKNOWN_SERVER_ERROR, as Kafka's
    C{Errors.forCode} reads it, rather than a ValueError out of a client
    call.
    """
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.unknown_server_error


class KafkaConnectionError(KafkaError, ConnectionError):
    """
    The connection failed, timed out, or the broker sent bytes that are not a
    response to what we asked.  The connection is closed; the client opens a
    new one on the next request.  Both a L{KafkaError} (code
    C{NETWORK_EXCEPTION}) and a C{ConnectionError}.
    """

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.network_exception, message)


class TLSVerificationError(KafkaConnectionError):
    """
    The broker's certificate does not match the host name or IP address we
    connected to.
    """


@dataclass(frozen=True)
class TLSSettings:
    """
    What a TLS connection needs; PEM files, as Kafka's C{ssl.*.location}
    settings for PEM stores.

    @ivar cafile: CA bundle to verify the broker with; C{None} uses the
        system's default trust store.
    @ivar certfile: client certificate chain, for mutual TLS.
    @ivar keyfile: the client certificate's key (default: inside certfile).
    @ivar password: the key's passphrase.
    @ivar checkHostname: verify the certificate names the host (DNS SAN) or
        IP address (IP SAN) we connected to.
    """

    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    password: str | None = None
    checkHostname: bool = True

    def context(self):
        """
        @return: a pyOpenSSL client context that verifies the peer's chain.
        """
        from OpenSSL import SSL

        ctx = SSL.Context(SSL.TLS_CLIENT_METHOD)
        ctx.set_min_proto_version(SSL.TLS1_2_VERSION)
        try:
            self._load(ctx)
        except SSL.Error as e:
            # OpenSSL's own text ("bad decrypt", "no start line") does not
            # say which file or setting is wrong.
            raise ValueError(
                f"cannot load TLS settings (cafile={self.cafile!r}, certfile={self.certfile!r}, "
                f"keyfile={self.keyfile!r}, password {'set' if self.password else 'not set'}): {e}"
            ) from e
        return ctx

    def _load(self, ctx) -> None:
        from OpenSSL import SSL

        if self.cafile:
            ctx.load_verify_locations(self.cafile)
        else:
            ctx.set_default_verify_paths()
        # Chain verification happens in the handshake; the callback keeps
        # OpenSSL's verdict.  Host name checking comes after, in
        # service_identity, because OpenSSL's own needs extra setup per
        # connection that pyOpenSSL does not expose fully.
        ctx.set_verify(SSL.VERIFY_PEER, lambda conn, cert, errno, depth, ok: bool(ok))
        if self.password is not None:
            secret = self.password.encode("utf-8")
            ctx.set_passwd_cb(lambda maxLength, verify, userdata: secret)
        if self.certfile:
            ctx.use_certificate_chain_file(self.certfile)
            ctx.use_privatekey_file(self.keyfile or self.certfile)
            ctx.check_privatekey()


def pickVersion(apiKey: int, brokerRange: tuple[int, int] | None) -> int | None:
    """
    The highest version both the broker and kafkatwist's codec speak.

    @return: the version, or C{None} if the ranges do not overlap.
    """
    if brokerRange is None:
        return None
    ours = knownVersions(apiKey)
    if not ours:
        return None
    low = max(brokerRange[0], ours[0])
    high = min(brokerRange[1], ours[-1])
    return high if high >= low else None


def _isIPAddress(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class BrokerConnection:
    """
    A blocking connection to one broker.

    Thread-compatible: a lock serialises round trips, so two threads never
    interleave frames on the socket, but the object is meant to be used by
    one thread at a time (the client holds one per broker).

    @ivar host: the host we connect to (also the name TLS verifies).
    @ivar port: the port.
    @ivar brokerVersions: {apiKey: (min, max)} from the broker's ApiVersions.
    @ivar apiVersionsVersion: the ApiVersions version the handshake ended on.
    """

    def __init__(
        self,
        host: str,
        port: int,
        clientId: str | None = "kafkatwist-client",
        timeout: float = 30.0,
        tls: TLSSettings | None = None,
        tlsContext=None,
    ) -> None:
        self.host = host
        self.port = port
        self.clientId = clientId
        self.timeout = timeout
        self.tls = tls
        self._tlsContext = tlsContext
        self._sock: socket.socket | None = None
        self._ssl = None
        self._correlationId = 0
        self._lock = threading.RLock()
        self.brokerVersions: dict[int, tuple[int, int]] = {}
        self.apiVersionsVersion: int | None = None

    def __repr__(self) -> str:
        state = "open" if self.connected else "closed"
        return f"<BrokerConnection {self.host}:{self.port} {state}>"

    @property
    def connected(self) -> bool:
        return self._sock is not None

    # -- lifecycle -------------------------------------------------------

    def connect(self, negotiate: bool = True) -> None:
        """
        Open the socket, do the TLS handshake, and (unless told not to)
        learn the broker's API versions.

        @raise KafkaConnectionError: on any failure; nothing stays open.
        """
        if self._sock is not None:
            return
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as e:
            raise KafkaConnectionError(f"cannot connect to {self.host}:{self.port}: {e}") from e
        # Requests are single writes followed by a wait for the answer;
        # Nagle would only add latency.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        try:
            if self.tls is not None:
                self._startTLS()
            if negotiate:
                self._negotiate()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """
        Close the socket; safe to call more than once.
        """
        sock, self._sock = self._sock, None
        tlsConnection, self._ssl = self._ssl, None
        if tlsConnection is not None:
            try:
                tlsConnection.shutdown()
            except Exception:
                pass  # best effort: the peer may already be gone
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    # -- TLS -------------------------------------------------------------

    def _startTLS(self) -> None:
        from OpenSSL import SSL

        ctx = self._tlsContext if self._tlsContext is not None else self.tls.context()
        connection = SSL.Connection(ctx, self._sock)
        isIP = _isIPAddress(self.host)
        if not isIP:
            connection.set_tlsext_host_name(self.host.encode("idna"))
        connection.set_connect_state()
        # The socket goes non-blocking; every TLS call loops on WantRead /
        # WantWrite with select, which is how a timeout is honoured (pyOpenSSL
        # ignores the socket's own timeout).
        self._sock.setblocking(False)
        self._ssl = connection
        deadline = time.monotonic() + self.timeout
        try:
            self._tlsCall(connection.do_handshake, deadline)
        except SSL.Error as e:
            raise KafkaConnectionError(
                f"TLS handshake with {self.host}:{self.port} failed: {e}"
            ) from e
        if self.tls.checkHostname:
            self._verifyIdentity(connection, isIP)

    def _verifyIdentity(self, connection, isIP: bool) -> None:
        from service_identity import CertificateError, VerificationError
        from service_identity.pyopenssl import verify_hostname, verify_ip_address

        try:
            if isIP:
                verify_ip_address(connection, self.host)
            else:
                verify_hostname(connection, self.host)
        except (VerificationError, CertificateError) as e:
            raise TLSVerificationError(
                f"certificate of {self.host}:{self.port} does not match {self.host!r}: {e}"
            ) from e

    def _tlsCall(self, operation, deadline: float, *args):
        from OpenSSL import SSL

        while True:
            try:
                return operation(*args)
            except SSL.WantReadError:
                self._wait(deadline, forWrite=False)
            except SSL.WantWriteError:
                self._wait(deadline, forWrite=True)

    def _wait(self, deadline: float, forWrite: bool) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("timed out")
        if forWrite:
            _, ready, _ = select.select([], [self._sock], [], remaining)
        else:
            ready, _, _ = select.select([self._sock], [], [], remaining)
        if not ready:
            raise socket.timeout("timed out")

    # -- raw I/O ---------------------------------------------------------

    def _sendAll(self, data: bytes, deadline: float) -> None:
        if self._ssl is None:
            self._sock.settimeout(max(deadline - time.monotonic(), 0.001))
            self._sock.sendall(data)
            return
        view = memoryview(data)
        while view:
            sent = self._tlsCall(self._ssl.send, deadline, view[:65536])
            view = view[sent:]

    def _recvExactly(self, size: int, deadline: float) -> bytes:
        return bytes(self._recvInto(size, deadline))

    def _recvInto(self, size: int, deadline: float) -> bytearray:
        """
        Read exactly C{size} bytes into a new buffer, and return it (not a
        copy of it).
        """
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            if self._ssl is None:
                self._sock.settimeout(max(deadline - time.monotonic(), 0.001))
                n = self._sock.recv_into(view[got:], size - got)
            else:
                n = self._tlsRecvInto(view[got:], size - got, deadline)
            if n == 0:
                raise EOFError(f"{self.host}:{self.port} closed the connection")
            got += n
        return buf

    def _tlsRecvInto(self, view, size: int, deadline: float) -> int:
        from OpenSSL import SSL

        try:
            return self._tlsCall(self._ssl.recv_into, deadline, view, size)
        except SSL.ZeroReturnError:
            return 0
        except SSL.SysCallError as e:
            # (-1, 'Unexpected EOF'): the peer closed without close_notify
            if e.args and e.args[0] == -1:
                return 0
            raise

    # -- requests --------------------------------------------------------

    def nextCorrelationId(self) -> int:
        self._correlationId = (self._correlationId + 1) & 0x7FFFFFFF
        return self._correlationId

    def roundTrip(
        self, frame: bytes, expectResponse: bool = True, timeout: float | None = None
    ) -> bytes | None:
        """
        Write one request frame (size prefix included) and read one response
        frame.

        @param timeout: seconds for this round trip (default: the
            connection's timeout).
        @return: the response frame without its size prefix (correlation id
            first), or C{None} if C{expectResponse} is false (produce with
            acks=0, which the broker does not answer).
        @raise KafkaConnectionError: on failure; the connection is closed,
            because a half-read frame leaves the stream out of step.
        """
        return self._roundTrip(frame, expectResponse, timeout, asView=False)

    def _roundTrip(
        self, frame: bytes, expectResponse: bool, timeout: float | None, asView: bool
    ):
        """
        L{roundTrip}; with C{asView}, the response frame is a read-only
        memoryview over the buffer it was received into, not a copy of it:
        L{request} decodes it at once (the decoder copies out the fields it
        keeps), which saves copying every response, e.g. a Fetch's megabytes.
        """
        with self._lock:
            if self._sock is None:
                self.connect()
            deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
            try:
                self._sendAll(frame, deadline)
                if not expectResponse:
                    return None
                (size,) = _INT32.unpack(self._recvExactly(4, deadline))
                if size < 4 or size > _MAX_FRAME:
                    raise KafkaConnectionError(
                        f"{self.host}:{self.port} sent a frame of size {size}"
                    )
                response = self._recvInto(size, deadline)
                if asView:
                    return memoryview(response).toreadonly()
                return bytes(response)
            except KafkaConnectionError:
                self.close()
                raise
            except socket.timeout as e:
                self.close()
                raise KafkaConnectionError(
                    f"request to {self.host}:{self.port} timed out"
                ) from e
            except (OSError, EOFError) as e:
                self.close()
                raise KafkaConnectionError(f"connection to {self.host}:{self.port}: {e}") from e
            except Exception as e:
                # pyOpenSSL errors are not OSErrors
                self.close()
                raise KafkaConnectionError(
                    f"connection to {self.host}:{self.port}: {type(e).__name__}: {e}"
                ) from e

    def request(
        self,
        apiKey: int,
        apiVersion: int,
        entity,
        expectResponse: bool = True,
        timeout: float | None = None,
    ):
        """
        Send a request entity at the given version and decode the response.

        @return: the response entity, or C{None} if not C{expectResponse}.
        @raise KafkaConnectionError: on I/O failure or a response whose
            correlation id is not the one we sent.
        """
        with self._lock:
            correlationId = self.nextCorrelationId()
            frame = encodeRequestFrame(apiKey, apiVersion, correlationId, self.clientId, entity)
            response = self._roundTrip(frame, expectResponse, timeout, asView=True)
            if response is None:
                return None
            try:
                gotId, body = decodeResponseFrame(apiKey, apiVersion, response)
            except Exception as e:
                self.close()
                raise KafkaConnectionError(
                    f"cannot decode {apiKey} v{apiVersion} response from "
                    f"{self.host}:{self.port}: {type(e).__name__}: {e}"
                ) from e
            self._checkAnswers(gotId, correlationId)
            return body

    def requestFrame(self, apiKey: int, apiVersion: int, entity, timeout: float | None = None):
        """
        Send a request entity at the given version and return the response
        frame undecoded, for a caller that reads it by hand: a read-only
        C{memoryview} over the buffer it was received into (correlation id
        first, checked), no copy made.

        @raise KafkaConnectionError: on I/O failure or a response whose
            correlation id is not the one we sent.
        """
        with self._lock:
            correlationId = self.nextCorrelationId()
            frame = encodeRequestFrame(apiKey, apiVersion, correlationId, self.clientId, entity)
            response = self._roundTrip(frame, True, timeout, asView=True)
            # (_roundTrip refused a frame of fewer than 4 bytes)
            self._checkAnswers(_INT32.unpack_from(response, 0)[0], correlationId)
            return response

    def _checkAnswers(self, gotId: int, correlationId: int) -> None:
        """
        A response must answer the request just sent: any other correlation
        id leaves the stream out of step, so the connection is closed.
        """
        if gotId != correlationId:
            self.close()
            raise KafkaConnectionError(
                f"{self.host}:{self.port} answered correlation id {gotId}, "
                f"expected {correlationId}"
            )

    # -- version negotiation ---------------------------------------------

    def _negotiate(self) -> None:
        """
        ApiVersions: try v3; a broker that does not know it answers
        UNSUPPORTED_VERSION in the v0 body layout (so any client can read it)
        listing its ApiVersions range, and we retry with its highest version.
        """
        version = APIVERSIONS_START
        for _ in range(2):
            errorCode, body = self._apiVersions(version)
            if errorCode == ErrorCode.unsupported_version and version > 0:
                brokerMax = 0
                for api in body.api_keys:
                    if api.api_key == API_VERSIONS:
                        brokerMax = api.max_version
                if brokerMax >= version:
                    # a broker that claims it but refused it: do not loop
                    brokerMax = 0
                version = min(brokerMax, APIVERSIONS_START)
                continue
            if errorCode != ErrorCode.none:
                raise KafkaError(errorCode, f"ApiVersions v{version} refused by {self.host}")
            self.apiVersionsVersion = version
            self.brokerVersions = {
                int(api.api_key): (int(api.min_version), int(api.max_version))
                for api in body.api_keys
            }
            return
        raise KafkaError(
            ErrorCode.unsupported_version, f"{self.host} refused every ApiVersions version"
        )

    def _apiVersions(self, version: int):
        entity = make(
            requestType(API_VERSIONS, version),
            client_software_name=_SOFTWARE_NAME,
            client_software_version=__version__,
        )
        with self._lock:
            correlationId = self.nextCorrelationId()
            frame = encodeRequestFrame(API_VERSIONS, version, correlationId, self.clientId, entity)
            response = self.roundTrip(frame)
            # The response header is v0 for every ApiVersions version, and
            # the error code leads the body in every layout: read it first to
            # know which layout to decode.
            if len(response) < 6:
                self.close()
                raise KafkaConnectionError(f"short ApiVersions response from {self.host}")
            (gotId,) = _INT32.unpack_from(response, 0)
            (errorCode,) = _INT16.unpack_from(response, 4)
            if gotId != correlationId:
                self.close()
                raise KafkaConnectionError(
                    f"{self.host}:{self.port} answered correlation id {gotId}, "
                    f"expected {correlationId}"
                )
            bodyVersion = 0 if errorCode == ErrorCode.unsupported_version else version
            try:
                _, body = decodeResponseFrame(API_VERSIONS, bodyVersion, response)
            except Exception as e:
                self.close()
                raise KafkaConnectionError(
                    f"cannot decode ApiVersions v{bodyVersion} response from {self.host}: {e}"
                ) from e
            return responseError(errorCode), body

    def pick(self, apiKey: int) -> int | None:
        """
        @return: the version of C{apiKey} to use on this connection, or
            C{None} if the broker and kafkatwist share none.
        """
        return pickVersion(apiKey, self.brokerVersions.get(apiKey))
