# Each target bootstraps .venv by itself, so a fresh clone needs only `make test` or `make demo`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo lint typecheck unit conformance bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[mpi,onnx,torch,test]"
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check spmdrules rules tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict spmdrules rules

unit: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck unit

demo: $(STAMP)
	$(BIN)/python -m spmdrules.demo

conformance: $(STAMP)
	$(BIN)/python -m spmdrules.conformance spmdrules/conformance/data

bench: $(STAMP)
	$(BIN)/python bench/rule_latency.py

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache
