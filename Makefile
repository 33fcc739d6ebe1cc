# tiresias-slurm: `make demo` runs the built-in simulation, `make test` the whole suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-other-release test-fast cluster-up cluster-down bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test,clients]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/tiresias simulate

# The whole suite: brings up the local Slurm test cluster (installs Debian's Slurm
# packages when missing; needs root), then runs every test; then the real-Slurm suite
# again on the other Debian release's Slurm (test-other-release). Either failing fails
# the target; both always run. OTHER_RELEASE=0 leaves the second out (a quicker local run).
OTHER_RELEASE ?= 1
test: $(VENV)/.installed-test
	bash containers/install-system-deps.sh
	bash containers/slurm-cluster.sh up
	status=0; \
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) || status=$$?; \
	if [ "$(OTHER_RELEASE)" = 1 ]; then $(MAKE) --no-print-directory test-other-release || status=$$?; fi; \
	exit $$status

# The real-Slurm tests on the release this host does not run (Debian 12 host: Slurm
# 24.11 in a debootstrap trixie root; Debian 13 host: 22.05 in a bookworm root), in
# their own namespaces (containers/release-root.sh; needs root and, the first time,
# the Debian mirror and PyPI). OTHER_RELEASE_ARGS: pytest arguments instead of its default.
test-other-release:
	bash containers/release-root.sh test $(OTHER_RELEASE_ARGS)

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
