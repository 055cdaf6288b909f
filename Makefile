# mgpukit — two commands for a newcomer: `make demo` and `make test`.
# Each creates (or reuses) a local virtual environment in .venv and installs what it needs.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch is installed first, pinned, so the rest of the install takes it as it is.
# 2.13.0 has a CPU build on this project's machines; elsewhere pip takes the PyPI build (CUDA on Linux).
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.mgpukit-installed
WORKERS ?=
NB_TIMEOUT ?= 120
# parallel test workers (pytest-xdist): 0 runs the tests in this process alone (the default: on
# 2 cores two workers measured no faster, 89 vs 90 s, and wall-clock tests share the cores);
# JOBS=auto gives one worker per core on a bigger machine. Measured again after the cuts of
# 2026-12-07 (test_launch + test_data_parallel, load ~25 on 2 cores, back to back): -n 0 215 s
# wall / 36 s CPU, -n 2 221 s / 56 s (each worker imports torch and the kit again). With workers,
# `--dist loadfile` keeps a file's tests on one worker, so a module-scoped shared run (the
# sharding records, the saved checkpoint) is made once, not once per worker. The notebooks
# always run in one session: the cross-notebook leak check reads every earlier notebook's outputs.
JOBS ?= 0
DIST := --dist loadfile

.PHONY: install demo test test-fast test-unit test-notebooks test-browser test-gpu lab bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

## The tour of every strategy on the devices present; writes report/index.html
demo: $(STAMP)
	$(BIN)/mgpukit tour $(if $(WORKERS),--workers $(WORKERS),) --out report

## Every test, fast and slow, then every notebook top to bottom (nbmake); on $(JOBS) workers
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(JOBS) $(DIST) --durations=20 tests
	$(BIN)/python -m pytest -q -n 0 --durations=12 --nbmake --nbmake-timeout=$(NB_TIMEOUT) notebooks/

## The edit-test loop: the fast unit tests alone (no workers launched; < 2 min on 2 cores)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" --durations=10 tests

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -n $(JOBS) $(DIST) --durations=20 tests

test-notebooks: $(STAMP)
	$(BIN)/python -m pytest -q -n 0 --durations=12 --nbmake --nbmake-timeout=$(NB_TIMEOUT) notebooks/

## Every notebook run in JupyterLab + Chromium (Playwright): tracebacks, widgets, figures, screenshots.
## Needs Debian's chromium (apt-get install chromium) or MGPUKIT_CHROMIUM=/path; not part of `make test`.
test-browser: $(STAMP)
	MGPUKIT_BROWSER_TEST=1 $(BIN)/python -m pytest -q -s tests/browser

## The GPU check, whenever a GPU is at hand (< 8 min on one H100): every strategy on the GPUs present
## with parity, the kit's overhead over a plain loop, real vs emulated at one GPU, real-scale runs, the
## exported script. MODE=cpu rehearses it on CPU workers (QUICK=1: a few strategies and cases).
GPU_CHECK_OUT ?= report/gpu-check.json
test-gpu: $(STAMP)
	mkdir -p $(dir $(GPU_CHECK_OUT))
	$(BIN)/mgpukit bench gpu $(if $(MODE),--mode $(MODE),) $(if $(QUICK),--quick,) --json $(GPU_CHECK_OUT)

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

bench: $(STAMP)
	$(BIN)/mgpukit bench all

clean:
	rm -rf report runs .pytest_cache
