# tiresias-slurm: `make demo` runs the built-in simulation, `make test` the whole suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-repeat test-other-release test-fast cluster-up cluster-down bench clean

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

# The whole suite on three Slurm releases at the same time (containers/test-releases.sh):
# every test on this host's Slurm (brings up the local test cluster; installs Debian's
# Slurm packages when missing; needs root) and the real-Slurm tests in a debootstrap root
# of each other release (Debian 12 host: 24.11 and 26.05; Debian 13 host: 22.05 and 26.05;
# containers/release-root.sh; the roots are built the first time, from the Debian mirror
# and PyPI). One summary line per release; any failure fails the target.
# OTHER_RELEASE=0: this host's release only (a quicker local run).
OTHER_RELEASE ?= 1
test: $(VENV)/.installed-test
	bash containers/install-system-deps.sh
	$(if $(filter 0,$(OTHER_RELEASE)),RELEASES=host) PYTEST_ARGS="$(PYTEST_ARGS)" bash containers/test-releases.sh

# The real-Slurm tests N times on every release, at the same time; lists every test that
# failed in any run (the bar is none).
N ?= 3
test-repeat: $(VENV)/.installed-test
	bash containers/install-system-deps.sh
	bash containers/test-releases.sh --repeat $(N)

# The real-Slurm tests on the releases this host does not run, each in its root
# (OTHER_RELEASE_ARGS: pytest arguments instead of -m slurm).
test-other-release: $(VENV)/.installed-test
	RELEASES="$$(bash containers/release-root.sh suites)" ROOT_PYTEST_ARGS="$(OTHER_RELEASE_ARGS)" \
		bash containers/test-releases.sh

# Everything that needs no Slurm daemons. Only the test extra: torch and lightning (the
# clients extra) serve the real-Slurm client tests alone (marked slurm), so they are not
# installed for this target (the other targets still install them).
$(VENV)/.installed-fast: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test]'
	touch $@

test-fast: $(VENV)/.installed-fast
	$(BIN)/python -m pytest -q -m "not slurm" -n auto $(PYTEST_ARGS)

# The checkpoint helper alone, as a wheel users install into their jobs' venvs
# (dist/tiresias_checkpoint-*.whl; no package index carries it).
helper-wheel: $(VENV)/.installed
	$(BIN)/pip wheel -q --no-deps packaging/tiresias-checkpoint -w dist

cluster-up:
	bash containers/slurm-cluster.sh up

cluster-down:
	bash containers/slurm-cluster.sh down

bench: $(VENV)/.installed-test
	$(BIN)/python bench/bench_replay.py

clean:
	rm -rf $(VENV) build *.egg-info
