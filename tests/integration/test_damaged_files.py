"""
The daemon refuses damaged identity files with one line naming the file
(issue 11: a binary meta.properties gave a raw traceback, a missing one
silently minted a new cluster id).
"""

import os

import pytest

from tests.integration.helpers import dataDirectory, runTwistd

pytestmark = pytest.mark.integration


def refusal(tmp_path, directory) -> str:
    """
    Start the daemon on C{directory}: it must refuse with one line.
    """
    result = runTwistd(
        tmp_path, "--override", "listeners=PLAINTEXT://127.0.0.1:0",
        "--override", f"log.dir={directory}",
    )
    assert result.returncode != 0
    errorLines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errorLines) == 1, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    return errorLines[0]


@pytest.mark.parametrize(
    "damage, words",
    [
        (b"\x00\x9f\xff binary \xfe\x01", "is not a properties file"),
        (b"", "missing or empty, but the directory holds data"),
        (None, "missing or empty, but the directory holds data"),
        (b"#kafkatwist\nversion=1\ncluster.id=abc\nnode.id=2\n", "belongs to node.id 2"),
    ],
    ids=["binary", "empty", "missing", "other-node"],
)
def test_meta_properties_refused_with_one_line(tmp_path, damage, words):
    directory = dataDirectory(tmp_path)
    path = os.path.join(directory, "meta.properties")
    if damage is None:
        os.unlink(path)
    else:
        with open(path, "wb") as f:
            f.write(damage)
    line = refusal(tmp_path, directory)
    assert path in line and words in line


def test_topic_metadata_without_a_copy_refused_with_one_line(tmp_path):
    directory = dataDirectory(tmp_path)
    path = os.path.join(directory, "t-0", "topic-metadata.json")
    with open(path, "r+b") as f:
        f.truncate(20)
    assert path in refusal(tmp_path, directory)
