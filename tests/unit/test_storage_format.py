"""
C{kafkatwist-storage format --add-scram}: Kafka's argument syntax, and a
data directory the broker then starts from with those users.
"""

import base64
import os
import subprocess
import sys

import pytest

from kafkatwist.server.broker import META_PROPERTIES
from kafkatwist.security.credentials import CredentialStore
from kafkatwist.security.format import FormatError, main, parseScram
from kafkatwist.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, saltedPassword, verifyPassword

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_password_argument():
    user, mechanism, credential = parseScram("SCRAM-SHA-512=[name=alice,password=\"wonder land\"]")
    assert (user, mechanism, credential.iterations) == ("alice", "SCRAM-SHA-512", 4096)
    assert verifyPassword(SCRAM_SHA_512, credential, "wonder land")


def test_salted_password_argument():
    salt = b"0123456789abcdef"
    salted = saltedPassword(SCRAM_SHA_256, "pw", salt, 8192)
    user, mechanism, credential = parseScram(
        f"SCRAM-SHA-256=[name=bob,salt={base64.b64encode(salt).decode()},"
        f"saltedpassword={base64.b64encode(salted).decode()},iterations=8192]"
    )
    assert credential.salt == salt and credential.iterations == 8192
    assert verifyPassword(SCRAM_SHA_256, credential, "pw")


@pytest.mark.parametrize(
    "argument, message",
    [
        ("SCRAM-SHA-256", "Failed to find equals sign in SCRAM argument"),
        ("SCRAM-SHA-1=[name=a,password=b]", "The add-scram mechanism SCRAM-SHA-1 is not supported."),
        ("SCRAM-SHA-256=name=a,password=b]", "Expected configuration string to start with ["),
        ("SCRAM-SHA-256=[name=a,password=b", "Expected configuration string to end with ]"),
        ("SCRAM-SHA-256=[password=b]", "You must supply 'name' to add-scram"),
        ("SCRAM-SHA-256=[name=a]", "You must supply one of 'password' or 'saltedpassword'"),
        ("SCRAM-SHA-256=[name=a,saltedpassword=AAAA]", "You must supply 'salt' with 'saltedpassword'"),
        ("SCRAM-SHA-256=[name=a,password=b,colour=red]", "Unknown SCRAM configurations: colour"),
        ("SCRAM-SHA-256=[name=a,password=b,iterations=100]", "must be >= 4096"),
        ("SCRAM-SHA-256=[name=a,password=b,iterations=99999]", "must be <= 16384"),
        ("SCRAM-SHA-256=[name=a,password=b,iterations=x]", "Failed to parse iterations count: x"),
        ("SCRAM-SHA-256=[name=a,password=b,salt=!!]", "Failed to decode given salt"),
        ("SCRAM-SHA-256=[name=a,password]", "No equals sign found in SCRAM component: password"),
    ],
)
def test_bad_arguments(argument, message):
    with pytest.raises(FormatError) as e:
        parseScram(argument)
    assert message in str(e.value)


def test_format_writes_users_and_cluster_id(tmp_path, capsys):
    data = tmp_path / "data"
    code = main([
        "format", "--override", f"log.dir={data}", "-t", "MkU3OEVBNTcwNTJENDM2Qg",
        "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
        "--add-scram", "SCRAM-SHA-512=[name=alice,password=alice-secret]",
    ])
    assert code == 0
    out = capsys.readouterr().out
    assert "admin (SCRAM-SHA-256)" in out and "MkU3OEVBNTcwNTJENDM2Qg" in out
    store = CredentialStore.inDirectory(str(data))
    assert store.users() == ["admin", "alice"]
    assert verifyPassword(SCRAM_SHA_256, store.get("admin", "SCRAM-SHA-256"), "admin-secret")
    assert "cluster.id=MkU3OEVBNTcwNTJENDM2Qg" in (data / META_PROPERTIES).read_text()
    assert "secret" not in "".join(p.read_text() for p in data.iterdir())

    # Formatted already: refused, or left alone with --ignore-formatted.
    again = ["format", "--override", f"log.dir={data}", "-S", "SCRAM-SHA-256=[name=eve,password=x]"]
    assert main(again) == 1
    assert "is already formatted" in capsys.readouterr().err
    assert main(again + ["--ignore-formatted"]) == 0
    assert CredentialStore.inDirectory(str(data)).users() == ["admin", "alice"]


def test_bad_argument_changes_nothing(tmp_path, capsys):
    data = tmp_path / "data"
    assert main(["format", "--override", f"log.dir={data}", "-S", "SCRAM-SHA-256=[name=a]"]) == 1
    assert "You must supply one of" in capsys.readouterr().err
    assert not data.exists()


def test_runs_as_a_module(tmp_path):
    data = tmp_path / "data"
    result = subprocess.run(
        [sys.executable, "-m", "kafkatwist.security.format", "format", "--override", f"log.dir={data}",
         "--add-scram", "SCRAM-SHA-256=[name=admin,password=pw]"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert result.returncode == 0, result.stderr
    assert CredentialStore.inDirectory(str(data)).users() == ["admin"]
