# Every target creates .venv with pip when it is missing: torch 2.13.0 (CPU) first, then perdure.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.perdure-installed

.PHONY: demo test test-frameworks test-local-long test-ray bench-ray test-slurm bench-slurm test-k8s k8s-cluster \
	k8s-jobset bench-k8s \
	soak lint bench venv clean test-serve-fuzz test-transport spec-reference test-gpu moto-venv \
	bench-s3 test-s3 docs docs-serve docs-reference test-compat

venv: $(STAMP)

# Each step says what it is and how long it took: a first build takes minutes of pip -q.
# The versions are constraints.txt's (today's, exact): the tests always see the same packages.
$(STAMP): pyproject.toml constraints.txt
	@echo "Building $(VENV) (once; later runs reuse it): torch 2.13.0 for CPU, then perdure"
	@scripts/timed "1/4 a Python virtual environment in $(VENV)" \
	    sh -c 'test -x $(BIN)/python || $(PY) -m venv $(VENV)'
	@scripts/timed "2/4 an up-to-date pip" $(BIN)/pip install -q --upgrade pip
	@scripts/timed "3/4 torch 2.13.0, the CPU wheel (the longest step)" \
	    $(BIN)/pip install -q -c constraints.txt torch
	@scripts/timed "4/4 perdure and its extras: test, serve, ray, hf, lightning, kubernetes" \
	    $(BIN)/pip install -q -c constraints.txt -e '.[test,serve,ray,hf,lightning,kubernetes]'
	@touch $(STAMP)
	@echo "$(VENV) is ready"

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
	$(BIN)/python -m pytest -q --durations=25

test-s3: $(STAMP) moto-venv
	$(BIN)/python -m pytest -q -m 's3_long' tests/integration/runtime tests/e2e/serve

test-ray: $(STAMP) moto-venv
	$(BIN)/python -m pytest -q -m 'ray_long' tests/integration/ray

bench-ray: $(STAMP)
	$(BIN)/pip install -q -c constraints.txt -e '.[bench-ray]'
	flock /tmp/perdure-heavy.lock $(BIN)/python bench/ray.py

# A real Slurm cluster of namespace hosts (root; apt-get install slurm-wlm munge): the long runs.
test-slurm: $(STAMP)
	flock /tmp/perdure-heavy.lock $(BIN)/python -m pytest -q -m 'slurm_long' tests/integration/slurm

bench-slurm: $(STAMP)
	flock /tmp/perdure-heavy.lock $(BIN)/python bench/slurm.py

# A real Kubernetes cluster of namespace hosts (root; apt-get install containerd runc
# containernetworking-plugins busybox-static): its components built from Go modules once
# (k8s-cluster, into ~/.cache/perdure-k8s or PERDURE_K8S_CACHE), and the JobSet controller
# (k8s-jobset, beside them), then the long runs.
k8s-cluster:
	k8s/cluster/build.sh

k8s-jobset:
	k8s/jobset/build.sh

test-k8s: $(STAMP)
	flock /tmp/perdure-heavy.lock $(BIN)/python -m pytest -q -m 'k8s_long or not k8s_long' tests/integration/k8s

bench-k8s: $(STAMP)
	flock /tmp/perdure-heavy.lock $(BIN)/python bench/k8s.py

soak: $(STAMP)
	$(BIN)/python -m pytest -q -m soak

test-serve-fuzz: $(STAMP)
	$(BIN)/python -m pytest -q -m serve_fuzz tests/e2e/serve

# The CUDA paths (RNG, pinned staging, NCCL failures, GPU placement on a real host). They skip
# without CUDA; the venv's torch must be a CUDA build: PY=... or pip install torch (CUDA) first.
test-gpu: $(STAMP)
	$(BIN)/python -m pytest -q -rs -m gpu tests/unit/runtime/test_rng.py tests/integration/gpu

# Every supported torch minor (2.6 .. 2.14) and the frameworks' ends, each in a venv of its own
# under $$PERDURE_COMPAT_DIR (default ~/.cache/perdure-compat; 4-7 GB each, built once): prints
# the table, updates docs/compat-matrix.json and docs/guides/versions.md. CELLS=torch-2.6,...
test-compat: $(STAMP)
	$(BIN)/python scripts/compat_matrix.py --cells '$(or $(CELLS),*)'

test-frameworks: $(STAMP)
	$(BIN)/python -m pytest -q -m frameworks_long tests/integration/frameworks

# Local-backend runs beside a default test of the same ground: DDP over 2x2 processes matching
# 4 replicas, a synchronous DDP straggler named from stack samples, snapshot restores thinning
# the auto interval's failure estimate.
test-local-long: $(STAMP)
	$(BIN)/python -m pytest -q -m local_long tests/integration/controller

test-transport: $(STAMP)
	$(BIN)/python -m pytest -q -m transport_long

# The site's generated pages (spec, CLI, Python and HTTP API, error codes, lifecycle, failure
# policy) from the code; tests/unit/docs fails when one is stale.
docs-reference: $(STAMP)
	$(BIN)/python -m perdure.docgen

spec-reference: docs-reference

# The documentation site (docs/, mkdocs.yml): the docs extra goes into .venv on first use.
DOCS_STAMP := $(VENV)/.perdure-docs-installed

$(DOCS_STAMP): $(STAMP)
	@scripts/timed "the docs extra: MkDocs and Material" $(BIN)/pip install -q -e '.[docs]'
	@touch $@

# Strict: a warning (a broken link, a page missing from the nav) fails the build.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-serve: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8000

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/controller.py

bench-s3: $(STAMP) moto-venv
	flock /tmp/perdure-heavy.lock $(BIN)/python bench/s3.py

clean:
	rm -rf $(VENV) $(MOTO_VENV) .perdure
