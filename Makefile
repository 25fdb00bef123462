# Two commands do all set-up on a fresh machine:
#   make serve   -- create .venv, install everything, start the server on the demo model
#   make test    -- the same set-up, then the whole test suite
# Both are idempotent: the install step re-runs only when pyproject.toml changes.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The CPU build of torch is served locally under this exact pin; an unpinned
# torch would pull several GB of CUDA packages.
TORCH_PIN ?= torch==2.13.0
# Two worker processes (pytest-xdist): 1003 -> 590 s on a 2-core host, where much of the
# suite waits on subprocesses, servers and timeouts. PYTEST_ARGS= runs it serially.
# --durations: the slowest tests are named at the end of every run, so a suite that grows
# past its budget (~25 min on CI's 2 cores) shows where the time went.
PYTEST_ARGS ?= -n 2 --durations=30

.PHONY: install serve test lint typecheck check bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install "$(TORCH_PIN)"
	$(PY) -m pip install -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/actorllm serve

# pytest exits 5 when it collects no tests (e.g. a -k filter that matches nothing):
# say so plainly and exit 0, as there was no failure to report.
# compileall first: where PYTHONDONTWRITEBYTECODE is set (the development hosts set it),
# every process the suite starts (servers, ranks, scripts: hundreds) would otherwise
# compile the package from source again, ~0.5 s each; reading bytecode is still allowed.
test: $(STAMP)
	@$(PY) -m compileall -q -j 0 actorllm tests >/dev/null
	@rc=0; $(PY) -m pytest $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$rc

lint: $(STAMP)
	$(VENV)/bin/ruff check actorllm tests benchmarks examples
	$(VENV)/bin/ruff format --check actorllm tests benchmarks examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy

check: lint typecheck test

clean:
	rm -rf $(VENV) build *.egg-info
