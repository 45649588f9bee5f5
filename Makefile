# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: demo test test-full test-all lint types unit venv clean bench bench-overhead

$(STAMP):
	@command -v $(PY) >/dev/null || { echo "need $(PY) on PATH"; exit 1; }
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,bench,service,ml,k8s]'
	@rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/tenantml demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: $(STAMP)
	$(BIN)/mypy

# `make test`: lint, types, unit and contract tests, and the main paths end to end on real
# servers on loopback (target: 10 min on 2 cores; docs/tests.md). `make test-all` adds the tests
# marked `full`: the fault drills (chaos, zombie runs, tenant isolation), the kills and restarts,
# the second node, the second signal, the slow start-up and deployment paths (a database
# migrated from nothing, the Kubernetes pool), a SEER stage resumed below its trials' best:
# about 40 min more. CI (.ci/run) runs both.
# TEST_WORKERS pytest processes (pytest-xdist), one test file each at a time: the files' server
# fixtures are module-scoped, and the integration tests spend most of their time waiting.
TEST_WORKERS ?= 2
# One BLAS and OpenMP thread per process (inherited by the servers, workers and jobs the tests
# start): the test workers already fill the cores, and OpenBLAS's spinning threads on top of
# them slowed the benchmarks' worker processes 4.4x (`tenantml.bench._pool`; for the suite the
# gain was small: docs/tests.md). A user's own runs keep the defaults.
ONE_THREAD := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
PYTEST := $(ONE_THREAD) $(BIN)/pytest -q --durations=15 -n $(TEST_WORKERS) --dist loadfile

unit: $(STAMP)
	$(PYTEST) -m "not full" tests

# The fault drills one at a time: each times kills and heartbeats on a loaded machine.
test-full: $(STAMP)
	$(BIN)/pytest -q --durations=15 -m full tests

test: lint types unit

test-all: test test-full

bench: $(STAMP)
	$(BIN)/tenantml bench delgado179 --out results/bench-delgado179

bench-overhead: $(STAMP)
	$(BIN)/tenantml bench-overhead --out results/overhead

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
