# Every target creates .venv with pip when it is missing: torch 2.13.0 (CPU) first, then perdure.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.perdure-installed

.PHONY: demo test test-ray bench-ray soak lint bench venv clean test-serve-fuzz test-transport moto-venv bench-s3 test-s3

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,serve,ray]'
	touch $(STAMP)

# The S3 tests' server (moto) in an environment of its own: next to s3fs it breaks botocore's
# pin. The tests' fixture makes it on first use when this target was not run.
MOTO_VENV := .venv-moto
moto-venv: $(MOTO_VENV)/.moto-installed

$(MOTO_VENV)/.moto-installed:
	test -x $(MOTO_VENV)/bin/python || $(PY) -m venv $(MOTO_VENV)
	$(MOTO_VENV)/bin/pip install -q 'moto[server]==5.2.5'
	touch $@

demo: $(STAMP)
	$(BIN)/python examples/ddp_mlp/demo.py

test: $(STAMP) moto-venv
	$(BIN)/python -m pytest -q

test-s3: $(STAMP) moto-venv
	$(BIN)/python -m pytest -q -m 's3_long' tests/integration/runtime tests/e2e/serve

test-ray: $(STAMP) moto-venv
	$(BIN)/python -m pytest -q -m 'ray_long' tests/integration/ray

bench-ray: $(STAMP)
	$(BIN)/pip install -q -e '.[bench-ray]'
	flock /tmp/perdure-heavy.lock $(BIN)/python bench/ray.py

soak: $(STAMP)
	$(BIN)/python -m pytest -q -m soak

test-serve-fuzz: $(STAMP)
	$(BIN)/python -m pytest -q -m serve_fuzz tests/e2e/serve

test-transport: $(STAMP)
	$(BIN)/python -m pytest -q -m transport_long

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/controller.py

bench-s3: $(STAMP) moto-venv
	flock /tmp/perdure-heavy.lock $(BIN)/python bench/s3.py

clean:
	rm -rf $(VENV) $(MOTO_VENV) .perdure
