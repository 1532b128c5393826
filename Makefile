# Every target creates .venv with pip when it is missing: torch 2.13.0 (CPU) first, then perdure.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.perdure-installed

.PHONY: demo test test-frameworks test-ray bench-ray soak lint bench venv clean test-serve-fuzz test-transport

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,serve,ray,hf,lightning]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/ddp_mlp/demo.py

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-ray: $(STAMP)
	$(BIN)/python -m pytest -q -m 'ray_long' tests/integration/ray

bench-ray: $(STAMP)
	$(BIN)/pip install -q -e '.[bench-ray]'
	flock /tmp/perdure-heavy.lock $(BIN)/python bench/ray.py

soak: $(STAMP)
	$(BIN)/python -m pytest -q -m soak

test-serve-fuzz: $(STAMP)
	$(BIN)/python -m pytest -q -m serve_fuzz tests/e2e/serve

test-frameworks: $(STAMP)
	$(BIN)/python -m pytest -q -m frameworks_long tests/integration/frameworks

test-transport: $(STAMP)
	$(BIN)/python -m pytest -q -m transport_long

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/controller.py

clean:
	rm -rf $(VENV) .perdure
