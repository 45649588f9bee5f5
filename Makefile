# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: demo test lint types unit venv clean bench bench-overhead

$(STAMP):
	@command -v $(PY) >/dev/null || { echo "need $(PY) on PATH"; exit 1; }
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,bench,service,ml]'
	@rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/tenantml demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q --durations=30 tests

test: lint types unit

bench: $(STAMP)
	$(BIN)/tenantml bench delgado179 --out results/bench-delgado179

bench-overhead: $(STAMP)
	$(BIN)/tenantml bench-overhead --out results/overhead

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
