# The two commands of the README:  make run (the app)  |  make test
# Both create a local virtual environment (.venv) and install what is needed first.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test test-fast test-models test-hosts test-frameworks install lint bench clean gpu-check

run: $(VENV)/.installed-app
	$(BIN)/mgpu-tui $(ARGS)

# Two workers: most of a test's time is processes starting (torchrun, torch imports),
# so two overlap well even on two cores (three are no faster, and starve the app tests). A worker
# that runs out of tests takes some of the other's, so neither idles at the end.
test: install
	$(BIN)/python -m pytest -n 2 --dist worksteal --durations=30

# The unit tests alone (tests/unit: no process started), in seconds: two workers, about 20 s on
# two cores where one took 30 (most of a unit test's time is torch's own work, which overlaps).
test-fast: install
	$(BIN)/python -m pytest tests/unit -q -n 2

# Separate hosts on this machine (root: network namespaces), and a real Slurm cluster on them
# (Debian's slurm-wlm and munge): one job over several hosts, a lost host, sbatch, scancel, the time
# limit, a node that dies. About 4 minutes; CI runs it after `make test`.
test-hosts: install
	$(BIN)/python -m pytest -m "hosts or slurm" --durations=12 tests/integration/test_separate_hosts.py tests/integration/test_slurm.py

# Every mode trained against the single-device baseline, and the memory plan against torch's own
# trackers (tests/models): whole models trained on 2 CPU ranks, about a minute and a half. Apart
# from `make test` so that each stays well under ten minutes on CI's 2 cores; CI runs it after it.
test-models: install
	$(BIN)/python -m pytest -n 2 --dist worksteal -m models --durations=12 tests/models

# The scripts users write, launched as they launch them, each against the job's own log
# (tests/frameworks): unchanged scripts under the drop-in, mp.spawn's shapes under `exec`, and
# Lightning, accelerate, transformers and DeepSpeed (installed for this stage alone) with their own
# launchers; about three minutes. CI runs it after `make test`.
test-frameworks: $(VENV)/.installed-frameworks
	$(BIN)/python -m pytest -n 2 --dist worksteal -m frameworks --durations=12 tests/frameworks

install: $(VENV)/.installed

$(VENV)/.installed-frameworks: $(VENV)/.installed
	DS_BUILD_OPS=0 $(BIN)/python -m pip install --quiet -e '.[dev,frameworks]'
	touch $@

# Reinstall when the dependencies change: the app's first, then the dev tools.
# The tree is byte-compiled, as pip compiles a wheel: where PYTHONDONTWRITEBYTECODE is set (this
# kind of machine sets it), every process would compile mgpu-tui's modules again (0.1 s each, and
# a run starts several); Python still reads the .pyc files it finds, and ignores stale ones.
$(VENV)/.installed-app: pyproject.toml scripts/install-torch.sh
	bash scripts/install-torch.sh "$(PYTHON)" "$(VENV)"
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/python -m compileall -q mgpu_tui engine demos
	touch $@

$(VENV)/.installed: $(VENV)/.installed-app
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

# On a machine with an NVIDIA GPU: validate every CUDA path (docs/gpu-validation.md). Without
# one it says so in one sentence and exits 3 before installing anything (make reports "Error 3").
gpu-check:
	@$(PYTHON) scripts/gpu_check.py --gpu-or-exit
	@$(MAKE) --no-print-directory $(VENV)/.installed-app
	$(BIN)/python scripts/gpu_check.py

# Every file: ruff's linter and its formatter; mypy over the package as it installs (CI runs this too).
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	bash scripts/typecheck.sh $(BIN)/mypy

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) runs .pytest_cache
