"""
setuptools' PEP 517 backend, with one change to editable installs.

C{pip install -e .} maps kafkatwist's packages through an import hook, and
for C{twisted.plugins} adds a path entry that exists only for that hook.
Twisted's plugin scan lists the files of each directory on
C{twisted.plugins.__path__}, so it never sees C{twisted/plugins/
kafkatwist_broker.py} and C{twistd kafkatwist} is an "Unknown command".

The editable wheel therefore also gets a C{.pth} naming the source tree:
with it on C{sys.path}, C{<tree>/twisted/plugins} is a real directory on
C{twisted.plugins.__path__} (Twisted adds one for each path entry).  The
tree is what C{make} puts on C{PYTHONPATH} anyway.  Regular builds
(C{pip install .}, wheels, sdists) are setuptools' own.
"""

import base64
import hashlib
import os
import zipfile

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403 - every other hook unchanged

PTH_NAME = "kafkatwist_source_tree.pth"


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    name = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    addToWheel(os.path.join(wheel_directory, name), PTH_NAME, f"{os.path.abspath(os.getcwd())}\n")
    return name


def addToWheel(path: str, member: str, text: str) -> None:
    """
    Rewrite the wheel at C{path} with C{member} added and listed in its
    C{RECORD} (a wheel whose RECORD misses a file is refused by installers).
    """
    data = text.encode("utf-8")
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(path) as wheel:
        entries = [(info, wheel.read(info)) for info in wheel.infolist()]
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for info, content in entries:
            if info.filename.endswith(".dist-info/RECORD"):
                content = content + f"{member},sha256={digest},{len(data)}\n".encode()
                out.writestr(member, data)
            out.writestr(info, content)
    os.replace(tmp, path)
