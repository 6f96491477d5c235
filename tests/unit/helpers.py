"""
What several tests share: the plugin examples loaded as drop-ins, a record
batch rewritten, a Metadata v12 request that aborted kio.
"""

from __future__ import annotations

import importlib.util
import os
import struct
import sys

from crc32c import crc32c

from kafkatwist.protocol import batch as B

#: Metadata v12 whose topic count is the 5-byte varint ff ff ff ff 7f: kio
#: reserved 2^35 elements and Rust aborted the broker (issue 11).
METADATA_V12_ABORT = "000000140003000c0000000100017800ffffffff7f000000"


def rewrite(data: bytes, *, count=None, lastOffsetDelta=None, payload=None, attributes=None):
    """
    Patch a batch's header fields (or replace its payload) and fix its
    length and CRC, as an attacker with a CRC library would.
    """
    b = bytearray(data)
    if payload is not None:
        b[B.HEADER_SIZE :] = payload
        struct.pack_into(">i", b, 8, len(b) - B.LOG_OVERHEAD)
    if count is not None:
        struct.pack_into(">i", b, 57, count)
    if lastOffsetDelta is not None:
        struct.pack_into(">i", b, 23, lastOffsetDelta)
    if attributes is not None:
        struct.pack_into(">h", b, B.ATTRIBUTES_AT, attributes)
    struct.pack_into(">I", b, B.CRC_AT, crc32c(bytes(b[B.ATTRIBUTES_AT :])))
    return bytes(b)


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "plugins_examples")


def loadExample(name: str):
    """
    Import C{plugins_examples/<name>.py} under the name the broker gives
    drop-ins, C{kafkatwist.dropins.<name>}, once per process (a second
    import would register the log sizes schemas again with new classes).
    """
    moduleName = f"kafkatwist.dropins.{name}"
    module = sys.modules.get(moduleName)
    if module is None:
        spec = importlib.util.spec_from_file_location(
            moduleName, os.path.join(EXAMPLES, f"{name}.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[moduleName] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[moduleName]
            raise
    return module
