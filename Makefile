# tiresias-slurm: `make demo` runs the built-in simulation, `make test` the whole suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast cluster-up cluster-down bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/tiresias simulate

# The whole suite: brings up the local Slurm test cluster (installs Debian's Slurm
# packages when missing; needs root), then runs every test.
test: $(VENV)/.installed-test
	bash containers/install-system-deps.sh
	bash containers/slurm-cluster.sh up
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# Everything that needs no Slurm daemons.
test-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m "not slurm" $(PYTEST_ARGS)

cluster-up:
	bash containers/slurm-cluster.sh up

cluster-down:
	bash containers/slurm-cluster.sh down

bench: $(VENV)/.installed-test
	$(BIN)/python bench/bench_replay.py

clean:
	rm -rf $(VENV) build *.egg-info
