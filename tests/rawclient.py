"""
A bare socket speaking frames, for wire-level tests.
"""

import socket
import struct

from kafkatwist.protocol.apis import requestType
from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
from kafkatwist.protocol.entities import make


class RawConnection:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlationId = 0

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def readFrame(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("closed by broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def request(self, apiKey: int, version: int, **fields):
        self.correlationId += 1
        entity = make(requestType(apiKey, version), **fields)
        self.send(encodeRequestFrame(apiKey, version, self.correlationId, "raw", entity))
        correlationId, response = decodeResponseFrame(apiKey, version, self.readFrame())
        assert correlationId == self.correlationId
        return response

    def apiVersions(self, version: int = 3):
        return self.request(
            18, version, client_software_name="raw", client_software_version="1"
        )

    def isClosedByPeer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()
