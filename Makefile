# Set-up and entry points. Every target is idempotent: re-running does only
# what is missing.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
SHARED ?= ../shared/datasets
CACHE ?= .cache/tff
STAMP := $(VENV)/.installed
# Set-up steps import TensorFlow: keep its C++ start-up lines (CUDA probing
# on a CPU machine) out of the output. Training and tests keep TF's errors.
QUIET := TF_CPP_MIN_LOG_LEVEL=2

.PHONY: setup data run test test-fast benchmark peers-env benchmark-peers fedjax-env clean

# Set-up also registers this venv's Python as the notebooks' Jupyter kernel,
# "tff_hpo (.venv)".
setup: $(STAMP)

$(STAMP): requirements.txt requirements-tff.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-tff.txt
	$(QUIET) $(PY) -m tff_hpo.execution.runtime --self-check
	$(PY) -m ipykernel install --user --name tff_hpo --display-name "tff_hpo (.venv)" >/dev/null
	touch $@

# Converts ../shared/datasets into TFF's cache files (idempotent, atomic).
data: setup
	$(QUIET) $(PY) -m tasks.offline.prepare --source_dir=$(SHARED) --cache_dir=$(CACHE)

# The main job: FedAvg on the offline FEMNIST subset with the default flags.
run: data
	$(PY) run_experiment.py --flagfile=flagfiles/emnist_fedavg_quick.cfg

# `bazel build //...` and the fast tests through Bazel, then the slow ones
# (real training, subprocesses) with pytest, so no test runs twice; pytest
# last, so its summary closes the output. tests/test_test_targets.py keeps
# every fast test file under a Bazel target. The slow tests keep one core
# busy on average (Python tracing beside the worker's kernels), so two pytest
# workers share this machine's 2 cores; each owns its own TFF worker.
PYTEST_WORKERS ?= 2

test: data
	bash .ci/bazel.sh
	$(PY) -m pytest -q --durations=15 -n $(PYTEST_WORKERS) -m slow tests

test-fast: data
	$(PY) -m pytest -q -m "not slow" tests

benchmark: data
	$(PY) benchmarks/round_time.py

# pfl (Apple) with a CPU build of torch, in an environment of its own, for
# benchmarks/peers.py; outside `setup`, CI and the tests (1.1 GB).
PEERS_VENV := .venv-peers
peers-env: $(PEERS_VENV)/.installed

$(PEERS_VENV)/.installed: benchmarks/peers/requirements.txt
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q --disable-pip-version-check -r $<
	touch $@

benchmark-peers: data peers-env
	$(PY) benchmarks/peers.py

# FedJAX 0.0.17 in an environment of its own, for the cross-check against
# FedJAX's FedAvg and the FATHOM authors' code (benchmarks/fedjax_crosscheck);
# outside `setup`, CI and the tests (about 2 GB: FedJAX's Stack Overflow
# tokenizer needs TensorFlow).
FEDJAX_VENV := .venv-fedjax
fedjax-env: $(FEDJAX_VENV)/.installed

$(FEDJAX_VENV)/.installed: benchmarks/fedjax_crosscheck/requirements.txt
	test -x $(FEDJAX_VENV)/bin/python || $(PYTHON) -m venv $(FEDJAX_VENV)
	$(FEDJAX_VENV)/bin/python -m pip install -q --disable-pip-version-check -r $<
	touch $@

clean:
	rm -rf $(VENV) $(PEERS_VENV) $(FEDJAX_VENV) .cache
