# Everything bootstraps .venv on first use: a fresh clone needs only
# `make run` or `make test`.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The working tree wins over the installed copy, so edits need no reinstall.
export PYTHONPATH := $(CURDIR):$(CURDIR)/spark

ARGS ?=
PYTEST_ARGS ?=
# `make fuzz FUZZ_ARGS="--seconds 600"`; see `python -m tests.fuzz --help`.
FUZZ_ARGS ?= --frames 1000000

.PHONY: install run test bench fuzz spark-demo certs clean cluster cluster-stop
.PHONY: test-fast
.PHONY: soak

$(STAMP): setup.cfg pyproject.toml
	@test -x $(BIN)/python || { echo "make: creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@echo "make: installing kafkatwist and its dependencies into $(VENV) (Twisted, PySpark, the test clients: a minute or two the first time)"
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet '.[spark,test,bench]'
	@touch $@
	@echo "make: $(VENV) is ready"

install: $(STAMP)

# `make run PORT=19092`; `ARGS="--override key=value ..."` adds settings.
PORT ?= 9092
# The data directory announced: log.dirs in ARGS wins over log.dir (Kafka's rule), else ./data.
RUN_DATA = $(or $(lastword $(patsubst log.dirs=%,%,$(filter log.dirs=%,$(ARGS)))),$(lastword $(patsubst log.dir=%,%,$(filter log.dir=%,$(ARGS)))),./data)
run: install
	@echo "make: starting kafkatwist on 127.0.0.1:$(PORT), data in $(RUN_DATA) (Ctrl-C stops it)"
	$(BIN)/twistd -n --pidfile= kafkatwist --override listeners=PLAINTEXT://127.0.0.1:$(PORT) --override log.dir=./data $(ARGS)

# The layers (import-linter contracts in pyproject.toml), ruff's error
# checks, and mypy on the typed modules; `make test` runs them first.
MYPY_PATHS ?= kafkatwist/protocol kafkatwist/interfaces.py
# the services object and the seams of issue 24 (the services engineer's)
MYPY_PATHS += kafkatwist/server/broker.py kafkatwist/replication/appends.py kafkatwist/plugins/clusterwrites.py
# the record walker's and the coordinator record codec's users (issue 24)
MYPY_PATHS += kafkatwist/log/compaction.py kafkatwist/log/cleaning.py
MYPY_PATHS += kafkatwist/coordinator/formats.py kafkatwist/coordinator/consumer_group_records.py
MYPY_PATHS += kafkatwist/coordinator/recordschemas.py kafkatwist/coordinator/runtime.py kafkatwist/coordinator/transaction/formats.py
.PHONY: lint
lint: install
	$(BIN)/lint-imports
	$(BIN)/ruff check kafkatwist tests bench spark plugins_examples twisted
	$(BIN)/mypy $(MYPY_PATHS)

# Everything, on TEST_WORKERS workers (the tests mostly wait on brokers, ZooKeeper and
# Spark, so three pay on two cores); a test file's tests stay on one worker, and the
# longest files start first (tests/scheduling.py). TEST_WORKERS=0: one test at a time.
TEST_WORKERS ?= 3
test: install lint
	@java -version >/dev/null 2>&1 || echo "NOTE: java not found: Spark tests will be skipped (PySpark needs Java 17)."
	$(BIN)/python -m pytest -p tests.scheduling -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The edit loop (about 3 minutes): units and single-broker integration on three
# workers as `make test` (a module's tests stay on one, the longest files start
# first); no ZooKeeper, Spark or fuzz run, no test marked slow.  `make test` runs
# everything.
FAST_TESTS ?= tests/unit tests/log tests/coordinator tests/client tests/integration tests/console tests/testing
FAST_ARGS ?= -p tests.scheduling -n 3 --dist loadfile
test-fast: install
	$(BIN)/python -m pytest -m "not slow" $(FAST_ARGS) $(FAST_TESTS) $(PYTEST_ARGS)

bench: install
	$(BIN)/python -m bench $(ARGS)

# The fail-over soak of issue 30: SOAK_ROUNDS leader kills and pauses in a row beside two
# CPU-bound processes, each new leader within zookeeper.session.timeout.ms + 10 s, nothing lost
# (tests/cluster/test_failover.py; a 4-round version is part of `make test`).
SOAK_ROUNDS ?= 50
soak: install
	KAFKATWIST_FAILOVER_ROUNDS=$(SOAK_ROUNDS) KAFKATWIST_FAILOVER_HOGS=2 KAFKATWIST_FAILOVER_BOUND=1 \
	  timeout 5400 $(BIN)/python -m pytest -q -x -p no:cacheprovider --timeout 5000 \
	  tests/cluster/test_failover.py::test_failovers_lose_nothing $(PYTEST_ARGS)

# The long fuzz run of issue 11 (40,000 frames, at most a minute, are part of `make test`):
# results in bench/fuzz-results.json, printed by `python -m bench fuzz`.
fuzz: install
	$(BIN)/python -m tests.fuzz $(FUZZ_ARGS)

# The broker `make run PORT=...` started (ARGS="--bootstrap HOST:PORT" wins).
spark-demo: install
	$(BIN)/python spark/examples/run_demo.py --bootstrap 127.0.0.1:$(PORT) $(ARGS)

# ZooKeeper (Debian's package, installed if missing) and three brokers on
# 127.0.0.1:9092-9094, data and logs under ./cluster/ (see README, Cluster).
# `make cluster BASE_PORT=19092 ZK_PORT=12181`: brokers on BASE_PORT, +1, +2.
BASE_PORT ?= 9092
ZK_PORT ?= 2181
cluster: install
	$(BIN)/python -m kafkatwist.cluster.local start --dir cluster --base-port $(BASE_PORT) --zk-port $(ZK_PORT) $(ARGS)

cluster-stop:
	$(BIN)/python -m kafkatwist.cluster.local stop --dir cluster

# A throwaway CA, server and client certificates in certs/ (openssl only; see README, TLS).
certs:
	sh deploy/make-certs.sh certs

# Also what the README's TLS and SASL steps leave (certs/, data-tls/, data-secured/);
# server.properties may hold your own settings: it stays (and is git-ignored).
clean:
	rm -rf $(VENV) build *.egg-info data cluster certs data-tls data-secured
