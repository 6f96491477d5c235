#!/bin/sh
# Build the image from this checkout and try it as a user would: start it
# with a data volume, produce and consume, stop it (docker stop), check the
# volume offline with kafkatwist-tools, start it again on the same volume and
# read the records back.
#
#   deploy/docker-smoke-test.sh          (from the checkout's root)
#
# Works without a registry: the Python packages are built into wheels here
# (pip wheel) and installed in the image with --no-index, and the build runs
# with --network none.  The container uses the host's network stack and
# listens on 127.0.0.1 only.
#
# Environment:
#   KAFKATWIST_DOCKER_BASE  base image (python:3.11-slim-bookworm); it must be
#                           present locally or pullable
#   PYTHON                  the host Python with confluent-kafka, for the client
#                           side (.venv/bin/python)
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE=${KAFKATWIST_DOCKER_BASE:-python:3.11-slim-bookworm}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
TAG=kafkatwist-smoke:$$
VOLUME=kafkatwist-smoke-$$
NAME=kafkatwist-smoke-$$
CONTEXT=$(mktemp -d)

cleanup() {
    docker rm -f "$NAME" >/dev/null 2>&1 || true
    docker volume rm -f "$VOLUME" >/dev/null 2>&1 || true
    docker image rm -f "$TAG" >/dev/null 2>&1 || true
    rm -rf "$CONTEXT"
}
trap cleanup EXIT

say() { echo "smoke: $*"; }

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    say "pulling $BASE"
    docker pull "$BASE" >/dev/null || { say "base image $BASE is not available"; exit 3; }
fi

say "build context from the tracked files, plus wheels of kafkatwist and its dependencies"
(cd "$ROOT" && git ls-files -z | xargs -0 tar -cf - ) | tar -xf - -C "$CONTEXT"
cp "$ROOT/.dockerignore" "$CONTEXT/" 2>/dev/null || true
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$CONTEXT/wheels" \
    "$CONTEXT" setuptools wheel 2>"$CONTEXT/pip.log" || { cat "$CONTEXT/pip.log"; exit 1; }

say "docker build (no network)"
DOCKER_BUILDKIT=0 docker build --quiet --network none --tag "$TAG" --build-arg "BASE=$BASE" \
    --build-arg "PIP_ARGS=--no-index --find-links /src/wheels" "$CONTEXT" >/dev/null

PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start() {
    docker run -d --name "$NAME" --network host -v "$VOLUME:/var/lib/kafkatwist" "$TAG" \
        --override "listeners=PLAINTEXT://127.0.0.1:$PORT" >/dev/null
    for _ in $(seq 1 120); do
        if docker logs "$NAME" 2>&1 | grep -q "kafkatwist node 1 of cluster .* started"; then
            return 0
        fi
        sleep 0.5
    done
    docker logs "$NAME" 2>&1 | tail -20
    say "the broker did not start"
    exit 1
}
client() {
    "$PYTHON" - "$PORT" "$1" <<'EOF'
import sys
import time

from confluent_kafka import Consumer, Producer

bootstrap, mode = f"127.0.0.1:{sys.argv[1]}", sys.argv[2]
if mode == "produce":
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(100):
        producer.produce("smoke", key=str(i).encode(), value=b"record %d" % i)
    assert producer.flush(30) == 0, "not everything was delivered"
else:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": mode,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["smoke"])
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < 100 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            seen.add(message.value())
    consumer.close()
    assert len(seen) == 100, f"read {len(seen)} of 100 records"
print(mode, "ok")
EOF
}

say "first start, as uid $(docker run --rm --entrypoint id "$TAG" -u)"
start
client produce
client first-read
say "docker stop (SIGTERM)"
docker stop --time 30 "$NAME" >/dev/null
docker logs "$NAME" 2>&1 | grep -q "kafkatwist stopped" || { say "no clean shutdown"; exit 1; }
docker rm "$NAME" >/dev/null

say "check the volume offline"
docker run --rm -v "$VOLUME:/var/lib/kafkatwist" --entrypoint kafkatwist-tools "$TAG" \
    check-data-dir data | tee "$CONTEXT/check.txt"
grep -q "Last shutdown: clean" "$CONTEXT/check.txt"

say "second start on the same volume"
start
client second-read
docker stop --time 30 "$NAME" >/dev/null
echo "smoke test passed"
