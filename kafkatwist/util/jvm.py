"""
The Java runtime that ZooKeeper and PySpark run on: where it is, and
Debian's C{default-jre-headless} (Java 17 on Debian 12, what PySpark 4
needs) installed when it is missing and this process may install.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from kafkatwist.util import debian

PACKAGE = "default-jre-headless"


def java() -> str | None:
    """
    The C{java} binary: C{$JAVA_HOME/bin/java} (what PySpark starts), else
    the one on C{PATH}, else Debian's C{/usr/bin/java}; C{None} if none.
    """
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return os.path.join(home, "bin", "java")
    return shutil.which("java") or ("/usr/bin/java" if os.path.exists("/usr/bin/java") else None)


def ensureJava(log: Callable[[str], object] | None = None) -> str:
    """
    L{java}, installing Debian's runtime first if there is none.

    @raise debian.PackageUnavailable: there is none and it cannot be installed.
    """
    debian.ensurePackage(PACKAGE, lambda: java() is not None, log)
    path = java()
    assert path is not None
    return path
