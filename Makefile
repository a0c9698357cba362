# fanout — the two front-door commands are `make demo` and `make test`; both set everything up.

# The interpreter .venv is made from: the first python3.11 on PATH (or in /usr/local/bin, /usr/bin)
# that is an optimized build (PGO/LTO; bench/interpreter.py says which are), else the first
# python3.11, else python3 (check-python then says what is missing). The relay's event loop is
# plain Python: an optimized build runs it faster (docs/benchmarks.md). `make PYTHON=...` overrides.
ifndef PYTHON
PYTHON := $(shell for python in $$(which -a python3.11 2>/dev/null) /usr/local/bin/python3.11 /usr/bin/python3.11; do \
	[ -x "$$python" ] && "$$python" bench/interpreter.py >/dev/null 2>&1 && { echo "$$python"; exit 0; }; \
	done; command -v python3.11 || command -v python3)
endif
# The executable behind $(PYTHON) (a pyenv shim names another): .venv is made anew when it changes.
PYTHON_EXE := $(shell $(PYTHON) -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
MADE_BY := $(VENV)/.made-by
ARCHIVE := $(VENV)/spark-classes.jsa
JAVA_EXE := $(shell readlink -f "$$(command -v java)" 2>/dev/null)
DEMO_ARGS ?=
TEST_ARGS ?=

.PHONY: setup demo test lint format bench lock clean check-python check-java FORCE

setup: $(INSTALLED)

# Which interpreter made .venv. Rewritten (and .venv made anew, empty) only when that changes,
# so that its date says when .venv must be filled again.
$(MADE_BY): FORCE | check-python
	@if [ "$$(cat $@ 2>/dev/null)" != "$(PYTHON_EXE)" ]; then \
		echo "$(VENV): made with $(PYTHON_EXE)"; \
		$(PYTHON) -m venv --clear $(VENV) && echo "$(PYTHON_EXE)" > $@; \
	fi

# setup.py builds the relay's compiled kernels (a C compiler and Python's headers; without
# them fanout installs and runs, slower: the relay cuts with numpy and the tests say so).
$(INSTALLED): requirements.lock pyproject.toml setup.py $(wildcard src/fanout/relay/kernels/*.pyx) $(MADE_BY)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	@# fanout was installed as "fanout" before it had a name of its own ("fanout-live"): a .venv
	@# made then holds that distribution too, whose metadata would still answer for the old name.
	@if $(BIN)/pip show --quiet fanout >/dev/null 2>&1; then $(BIN)/pip uninstall --quiet --yes fanout; fi
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(INSTALLED)

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "fanout needs Python 3.11 (found " + sys.version.split()[0] + "); set PYTHON=/path/to/python3.11")'

check-java:
	@command -v java >/dev/null || { echo "fanout needs Java 17 or newer on PATH (Spark runs on the JVM); e.g. apt-get install openjdk-17-jre-headless"; exit 1; }
	@java -version 2>&1 | awk -F'"' '/version/ { split($$2, v, "."); if (v[1] < 17) { print "fanout needs Java 17 or newer, found " $$2; exit 1 } }'

demo: setup check-java
	$(BIN)/fanout demo $(DEMO_ARGS)

test: setup check-java $(ARCHIVE)
	$(BIN)/pytest -n auto $(TEST_ARGS)

# Spark's classes as the JVM's class-data-sharing archive, which tests/conftest.py maps into every
# JVM the tests start (fanout.testing.jvmarchive): each publisher is ready about 4 s sooner. Made
# again when the packages or the java on PATH change.
$(ARCHIVE): $(INSTALLED) $(JAVA_EXE) | check-java
	$(BIN)/python -m fanout.testing.jvmarchive $@

lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

format: setup
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

bench: setup check-java
	$(BIN)/python bench/views.py
	$(BIN)/python bench/log.py
	$(BIN)/python bench/state.py
	$(BIN)/python bench/snapshots.py
	$(BIN)/python bench/snapshots.py --index sql
	$(BIN)/python bench/pipeline.py
	$(BIN)/python bench/relay.py
	$(BIN)/python bench/relaycore.py
	$(BIN)/python bench/wirefloor.py
	$(BIN)/python bench/release.py
	$(BIN)/python bench/sqlshare.py
	$(BIN)/python bench/postgres.py
	$(BIN)/python bench/sharing.py --compare-assign
	$(BIN)/python bench/soak.py --faults 10
	$(BIN)/python bench/idlecost.py
	$(BIN)/python bench/pushcost.py
	$(BIN)/python bench/mqttcore.py
	$(BIN)/python bench/mqtt.py
	$(BIN)/python bench/mqtt.py --spatial
	$(BIN)/python bench/handshakes.py
	$(BIN)/python bench/latency.py
	$(BIN)/python bench/microbatch.py
	$(BIN)/python bench/priority.py
	$(BIN)/python bench/transducers.py
	$(BIN)/python bench/source.py
	$(BIN)/python bench/passing.py
	$(BIN)/python bench/writes.py
	$(BIN)/python bench/objects.py
	$(BIN)/python bench/snoopy.py
	$(BIN)/python bench/sharingmodel.py
	$(BIN)/python bench/cluster.py
	$(BIN)/python bench/partitions.py
	$(BIN)/python bench/stalled.py
	$(BIN)/python bench/submemory.py
	$(BIN)/python bench/fuzz.py
	$(BIN)/python bench/memory.py

# Re-pin every dependency of every extra from pyproject.toml (needs network); versions already
# in requirements.lock are kept where they still fit. Commit the new requirements.lock.
lock:
	$(PYTHON) -m venv /tmp/fanout-lock-venv && /tmp/fanout-lock-venv/bin/pip install --quiet uv
	/tmp/fanout-lock-venv/bin/uv pip compile pyproject.toml --all-extras --generate-hashes \
		--python-version 3.11 -o requirements.lock

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache .hypothesis
