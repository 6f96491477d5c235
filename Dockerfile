# kafkatwist in a container, its data directory on a volume.
#
#   docker build -t kafkatwist .
#   docker run -d --name kafkatwist -p 9092:9092 -v kafkatwist-data:/var/lib/kafkatwist kafkatwist
#
# Arguments after the image name are more twistd kafkatwist options, e.g. the
# address clients outside the container must be told (the default advertises
# 127.0.0.1, right for clients on the same host through -p 9092:9092):
#
#   docker run ... kafkatwist --override advertised.listeners=PLAINTEXT://broker.example.com:9092
#
# A properties file: -v /etc/kafkatwist:/etc/kafkatwist:ro ... kafkatwist --config /etc/kafkatwist/server.properties
# Offline checks against the volume:
#   docker run --rm -v kafkatwist-data:/var/lib/kafkatwist --entrypoint kafkatwist-tools kafkatwist check-data-dir data
#
# BASE: any Debian-like image with python3 (3.11+) and its venv module.
# PIP_ARGS: extra pip options, e.g. "--no-index --find-links /src/wheels" to
# install from wheels put in the build context (deploy/docker-smoke-test.sh).
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
ARG PIP_ARGS=

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/kafkatwist \
        --shell /usr/sbin/nologin kafkatwist \
    && install -d -o kafkatwist -g kafkatwist /var/lib/kafkatwist

COPY . /src
RUN python3 -m venv /opt/kafkatwist/venv \
    && /opt/kafkatwist/venv/bin/pip install --no-cache-dir --disable-pip-version-check ${PIP_ARGS} /src \
    && rm -rf /src

ENV PATH=/opt/kafkatwist/venv/bin:$PATH
WORKDIR /var/lib/kafkatwist
USER kafkatwist
VOLUME ["/var/lib/kafkatwist"]
EXPOSE 9092

# Healthy once the Kafka port accepts connections (the broker binds it only
# after its configuration and plugins are good).
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s \
    CMD ["python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 9092), 2).close()"]

# -n: the broker is the container's main process; SIGTERM (docker stop) shuts
# it down cleanly. Later --override options (docker run arguments) win.
ENTRYPOINT ["twistd", "-n", "--pidfile=", "kafkatwist", "--override", "listeners=PLAINTEXT://0.0.0.0:9092", "--override", "log.dir=/var/lib/kafkatwist/data"]
CMD []
