# pytorch-horovod: build, lint and test the training image. `make help` lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -euc
.DEFAULT_GOAL := help

# The flavor follows the machine unless given: gpu where an NVIDIA GPU is visible, cpu elsewhere
# (scripts/lib.sh, default_flavor); a TAG of cpu or gpu given alone names its flavor. Said once
# per make run, on stderr; sub-makes inherit it through the environment.
GPU_VISIBLE := $(filter gpu,$(shell bash -c '. scripts/lib.sh && default_flavor'))
ifeq ($(origin FLAVOR),undefined)
FLAVOR_WHY := $(if $(filter cpu gpu,$(TAG)),from TAG=$(TAG),$(if $(GPU_VISIBLE),an NVIDIA GPU is visible,no NVIDIA GPU visible))
FLAVOR := $(or $(filter cpu gpu,$(TAG)),$(if $(GPU_VISIBLE),gpu,cpu))
$(shell echo "make: FLAVOR=$(FLAVOR) ($(FLAVOR_WHY); FLAVOR=$(if $(filter gpu,$(FLAVOR)),cpu,gpu) to override)" >&2)
endif
IMAGE ?= pytorch-horovod
TAG ?= $(FLAVOR)
# A client with BuildKit: one with the buildx plugin, or Docker < 23 (Debian's docker.io).
DOCKER ?= $(shell scripts/docker.sh client 2>/dev/null || echo docker)
LOCAL_BASE ?= pytorch-horovod-base:bookworm
VENV ?= .venv
PYTEST_ARGS ?=

export FLAVOR IMAGE TAG DOCKER LOCAL_BASE

# The first line of every target that runs $(IMAGE):$(TAG): builds it when the engine has none.
IMAGE_OR_BUILD = @$(DOCKER) image inspect $(IMAGE):$(TAG) >/dev/null 2>&1 || $(MAKE) --no-print-directory build

# Every host tool runs on the dev venv's python (its floor: hostkit/__init__.py), from make or,
# through PY, from the scripts make runs.
PY := $(abspath $(VENV))/bin/python
DEV_STAMP := $(VENV)/.installed
export PY

HOSTS ?= 2
SLOTS ?= 2
LAUNCHER ?= horovod
LOCAL_TRAIN_ARGS ?= --hp epochs=3
# make local-train, a heterogeneous job and a kept warm-pool cache (docs/sagemaker.md):
# INSTANCE_GROUPS=data:1,train:2 stands for HOSTS (given on the command line too, it must agree),
# DISTRIBUTION_GROUPS=train, WARM_POOL_CACHE=/abs/dir.
INSTANCE_GROUPS ?=
DISTRIBUTION_GROUPS ?=
WARM_POOL_CACHE ?=
LOCAL_TRAIN_INSTANCES = $(if $(INSTANCE_GROUPS),--instance-groups $(INSTANCE_GROUPS) \
	$(if $(filter command line,$(origin HOSTS)),--hosts $(HOSTS)),--hosts $(HOSTS)) \
	$(if $(DISTRIBUTION_GROUPS),--distribution-groups $(DISTRIBUTION_GROUPS)) \
	$(if $(WARM_POOL_CACHE),--warm-pool-cache "$(WARM_POOL_CACHE)")
NODES ?= 2
export NODES
ECR_REPOSITORY ?= pytorch-horovod
PUSH_ARGS ?=
ARGS ?=
# make dev: host ports on loopback (docs/development.md, "Several machines", for other machines).
DEV_BIND ?= 127.0.0.1
JUPYTER_HOST_PORT ?= 8888
SSH_HOST_PORT ?= 2222
TENSORBOARD_HOST_PORT ?= 6006
# The notebook root (/workspace: the getting-started notebook, runs/) is DEV_WORKSPACE, git-ignored
# local/dev; the checkout is /workspace/repo in it. Jupyter and SSH logins run as DEV_USER: your
# user name (dev where the image would refuse it) with your uid and gid, so what they write is
# yours; root when make runs as root, or DEV_USER=root. DEV_ARGS: more `docker run` options.
DEV_WORKSPACE ?= $(CURDIR)/local/dev
DEV_USER ?= $(shell id -un | grep -xE '[a-z_][a-z0-9_-]{0,31}' || echo dev)
DEV_ARGS ?=
DEV_KEYS ?= $(firstword $(wildcard $(HOME)/.ssh/id_ed25519.pub $(HOME)/.ssh/id_ecdsa.pub $(HOME)/.ssh/id_rsa.pub))
DEV_USER_ARGS = $(if $(filter-out root,$(DEV_USER)),-e BYOC_USER=$(DEV_USER) \
	$(if $(filter-out 0,$(shell id -u)),-e BYOC_UID=$(shell id -u) -e BYOC_GID=$(shell id -g)))

.PHONY: local-train help build local-base lint test test-unit test-container test-gpu shell dev engine clean \
	cluster-up cluster-down cluster-shell slurm-up slurm-down push launch test-deps standin build-gpu-standin \
	test-gpu-flavor test-quick nccl-test smoke bench k8s-validate k8s-sim k8s-overlay test-horovod test-horovod-soak canary lock sbom \
	test-container-soak

help: ## Show this help
	@echo "Usage: make TARGET [FLAVOR=cpu|gpu (default: gpu where an NVIDIA GPU is visible)] [IMAGE=...] [TAG=...] [DOCKER=...]"
	@echo
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-16s %s\n", $$1, $$2}'
	@echo
	@echo "Variables: FLAVOR=$(FLAVOR) IMAGE=$(IMAGE) TAG=$(TAG) DOCKER=$(DOCKER)"
	@echo "Build inputs (see docs/building.md): BASE_IMAGE, BUILDER_IMAGE, RUNTIME_IMAGE, WHEELHOUSE, TORCH_INDEX_URL, CUDA_ARCHS, BUILD_ARGS"

local-train: $(DEV_STAMP) engine ## The main job: SageMaker's `train` on HOSTS containers (SLOTS each) of $(IMAGE):$(TAG); LAUNCHER=horovod|torchrun, INSTANCE_GROUPS, DISTRIBUTION_GROUPS, WARM_POOL_CACHE
	$(IMAGE_OR_BUILD)
	$(PY) -m hostkit.local_train $(LOCAL_TRAIN_INSTANCES) --slots $(SLOTS) --launcher $(LAUNCHER) \
		--image $(IMAGE):$(TAG) $(LOCAL_TRAIN_ARGS)

engine: ## Make sure a Docker engine answers (as root on Debian/Ubuntu: install and start one)
	@scripts/docker.sh engine

build: $(DEV_STAMP) engine ## Build $(IMAGE):$(TAG) for FLAVOR (cpu falls back to a local Debian base without a registry)
	@scripts/build.sh

local-base: engine ## Make the OS base image $(LOCAL_BASE) from the Debian mirror (mmdebstrap + docker import)
	@scripts/local-base.sh $(LOCAL_BASE)

# uv fills the dev venv in seconds where pip takes a minute (every fresh machine and CI run waits
# for it). It trusts the system's CA store (a TLS-intercepting proxy's CA) with native TLS, as
# lock.sh does, but reads no pip.conf: where it cannot install (an index only pip is told of),
# pip does.
UV_PIP = UV_NATIVE_TLS=1 $(VENV)/bin/uv pip install -q --python $(VENV)/bin/python
$(DEV_STAMP): requirements-dev.txt tests/requirements-sdk.txt
	@python3 -c 'import hostkit'
	@scripts/prereq.sh venv
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q "$$(grep -xE 'uv==[0-9.]+' requirements-dev.txt)"
	$(UV_PIP) -r requirements-dev.txt || $(VENV)/bin/pip install -q -r requirements-dev.txt
	$(UV_PIP) --no-deps -r tests/requirements-sdk.txt || \
		$(VENV)/bin/pip install -q --no-deps -r tests/requirements-sdk.txt
	touch $@

sbom: $(DEV_STAMP) engine ## The SBOM of $(IMAGE):$(TAG) (CycloneDX, made at build time in the image), checked, into build/sbom/
	$(IMAGE_OR_BUILD)
	$(PY) -m hostkit.sbom --image $(IMAGE):$(TAG)

lock: $(DEV_STAMP) ## Regenerate the hash-locked docker/requirements*.txt from their .in files (uv; needs PyPI)
	@scripts/lock.sh

lint: $(DEV_STAMP) ## hadolint, shellcheck and ruff
	@scripts/prereq.sh shellcheck
	$(VENV)/bin/hadolint Dockerfile
	shellcheck -x scripts/*.sh tests/standin/build.sh docker/build/*.sh docker/bash-env.sh tests/conformance/*.sh .ci/run
	shellcheck -x deploy/slurm/*.sbatch deploy/slurm/common.sh tests/slurm/*.sh
	$(VENV)/bin/hadolint tests/conformance/Dockerfile tests/slurm/Dockerfile
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test-unit: $(DEV_STAMP) ## Unit tests (no Docker)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-deps: ## Tools the container tests drive: docker-registry, docker compose, Chromium (as root on Debian/Ubuntu: installs them)
	@scripts/docker.sh test-deps

test-container: $(DEV_STAMP) engine test-deps ## Container tests against $(IMAGE):cpu (built if missing)
	@$(DOCKER) image inspect $(IMAGE):cpu >/dev/null 2>&1 || $(MAKE) build FLAVOR=cpu TAG=cpu
	BYOC_IMAGE=$(IMAGE):cpu $(PY) -m pytest -m "not gpu_flavor" tests/container $(PYTEST_ARGS)

test-quick: $(DEV_STAMP) engine test-deps ## Lint, unit tests and the container tests not marked slow (no Slurm, elastic, k8s runs), against $(IMAGE):cpu
	@$(DOCKER) image inspect $(IMAGE):cpu >/dev/null 2>&1 || $(MAKE) build FLAVOR=cpu TAG=cpu
	$(MAKE) --no-print-directory lint test-unit
	BYOC_IMAGE=$(IMAGE):cpu $(PY) -m pytest -m "not gpu_flavor and not slow" tests/container $(PYTEST_ARGS)

SMOKE_ARGS ?= --hp epochs=1 --hp samples=1024 --timeout 600 --out local/smoke
smoke: engine ## The main job (make local-train), short, with each launcher, on $(IMAGE):cpu
	@$(DOCKER) image inspect $(IMAGE):cpu >/dev/null 2>&1 || $(MAKE) build FLAVOR=cpu TAG=cpu
	rm -rf local/smoke
	$(MAKE) --no-print-directory local-train TAG=cpu LAUNCHER=horovod LOCAL_TRAIN_ARGS="$(SMOKE_ARGS)"
	$(MAKE) --no-print-directory local-train TAG=cpu LAUNCHER=torchrun LOCAL_TRAIN_ARGS="$(SMOKE_ARGS)"

# How long a cold CI run of this takes on 2 cores, stage by stage: docs/tests.md.
TEST_LANES ?= 3
# make's own command for the stages, named apart so `make -n test` does not run them.
SUB_MAKE := $(MAKE)
test: $(DEV_STAMP) engine test-deps ## Lint, unit, container tests, the main job's smoke, the gpu flavor on stand-ins, Horovod's own suites: three lanes side by side (TEST_LANES=2 or 1: fewer)
	@TEST_LANES=$(TEST_LANES) $(PY) -m hostkit.testrun --make "$(SUB_MAKE)"

STANDIN ?= pytorch-horovod-standin
STANDIN_CUDA_ARCHS ?= 90

standin: engine ## nvidia/cuda stand-ins ($(STANDIN):devel, :base) from the local base and NVIDIA's CUDA wheels
	@tests/standin/build.sh

build-gpu-standin: standin ## The gpu flavor, unchanged Dockerfile, on the stand-ins: $(IMAGE):gpu-standin
	@FLAVOR=gpu TAG=gpu-standin BUILDER_IMAGE=$(STANDIN):devel RUNTIME_IMAGE=$(STANDIN):base \
		BASE_IMAGE=$(LOCAL_BASE) \
		CUDA_ARCHS=$(STANDIN_CUDA_ARCHS) scripts/build.sh

# Always (re)built from this checkout, so a stale image is never the one checked (cached: seconds).
test-gpu-flavor: $(DEV_STAMP) build-gpu-standin ## gpu flavor checks without a GPU: builds $(IMAGE):gpu-standin, tests it
	BYOC_GPU_IMAGE=$(IMAGE):gpu-standin $(PY) -m pytest -m gpu_flavor tests/container $(PYTEST_ARGS)

# Horovod's own test suites at the tag the image builds (docs/horovod-tests.md). The tag archive:
# HOROVOD_SRC_TARBALL, else a git mirror under BYOC_GIT_MIRRORS, else GitHub; none: skipped.
HOROVOD_SUITE_IMAGES ?= $(IMAGE):cpu $(IMAGE):gpu-standin
HOROVOD_SRC_TARBALL ?=
HOROVOD_SUITES_ARGS ?=
SUITES_CMD = $(PY) -m hostkit.horovod_suites $(foreach i,$(HOROVOD_SUITE_IMAGES),--image $(i)) \
	$(if $(HOROVOD_SRC_TARBALL),--source $(HOROVOD_SRC_TARBALL))
test-horovod: $(DEV_STAMP) engine ## Horovod's own suites (torch, elastic, runner...) on HOROVOD_SUITE_IMAGES, both controllers
	$(SUITES_CMD) $(HOROVOD_SUITES_ARGS)

SOAK_RUNS ?= 20
SOAK_LOAD ?= 2
test-horovod-soak: $(DEV_STAMP) engine ## Slow: test_torch.py SOAK_RUNS times per image and controller beside SOAK_LOAD busy containers
	$(SUITES_CMD) --suite torch --repeat $(SOAK_RUNS) --load $(SOAK_LOAD) $(HOROVOD_SUITES_ARGS)

# The container tests that depend on timing (marker timing: a time bound, a race between two
# detectors, ranks' interleaved output) run many times on a loaded machine (docs/tests.md).
CONTAINER_SOAK_RUNS ?= 10
test-container-soak: $(DEV_STAMP) engine test-deps ## Slow: the container tests marked timing (or PYTEST_ARGS) CONTAINER_SOAK_RUNS times beside SOAK_LOAD busy containers, with the counts
	@$(DOCKER) image inspect $(IMAGE):cpu >/dev/null 2>&1 || $(MAKE) build FLAVOR=cpu TAG=cpu
	$(PY) -m hostkit.soak --runs $(CONTAINER_SOAK_RUNS) --load $(SOAK_LOAD) --image $(IMAGE):cpu \
		-- $(or $(PYTEST_ARGS),-m "timing and not gpu_flavor")

canary: $(DEV_STAMP) engine ## The cpu image on TORCH_VERSION (TORCHVISION_VERSION: none unless given): Horovod's suites and the smoke job
	@TORCH_VERSION=$(TORCH_VERSION) TORCHVISION_VERSION=$(TORCHVISION_VERSION) \
		HOROVOD_SRC_TARBALL=$(HOROVOD_SRC_TARBALL) scripts/canary.sh

BENCH_ARGS ?=
bench: $(DEV_STAMP) engine ## Measure $(IMAGE):$(TAG) (built if missing) on NODES pinned containers: link, allreduce per library, training, scaling, launch, Pipe reader, elastic join/recovery -> bench/<stamp>/
	$(IMAGE_OR_BUILD)
	$(PY) -m hostkit.bench --nodes $(NODES) $(BENCH_ARGS)

k8s-validate: $(DEV_STAMP) ## Render every deploy/kubernetes overlay and validate it against the engines' pinned CRDs
	$(PY) -m hostkit.k8s_validate

ENGINE ?= mpijob
K8S_SIM_ARGS ?=
k8s-sim: $(DEV_STAMP) engine ## As root: run a deploy/kubernetes overlay as its engine would, on $(IMAGE):cpu: ENGINE=mpijob|trainer|volcano, K8S_SIM_ARGS
	@$(DOCKER) image inspect $(IMAGE):cpu >/dev/null 2>&1 || $(MAKE) build FLAVOR=cpu TAG=cpu
	$(PY) -m hostkit.k8s_sim --engine $(ENGINE) --image $(IMAGE):cpu $(K8S_SIM_ARGS)

# make k8s-overlay: the shipped overlay OVERLAY with your image (IMAGE_URI, as make push prints
# it) and, given, the checkpoint claim's STORAGE_CLASS, in local/k8s/OVERLAY for kubectl apply -k.
OVERLAY ?=
IMAGE_URI ?=
STORAGE_CLASS ?=
k8s-overlay: $(DEV_STAMP) ## Your overlay for kubectl apply -k: OVERLAY=mpijob-gpu IMAGE_URI=<make push's image_uri> [STORAGE_CLASS=...] -> local/k8s/OVERLAY
	$(PY) -m hostkit.k8s_overlay --overlay "$(OVERLAY)" --image-uri "$(IMAGE_URI)" \
		$(if $(STORAGE_CLASS),--storage-class "$(STORAGE_CLASS)")

nccl-test: engine ## all_reduce_perf on every local GPU in $(IMAGE):$(TAG); passes or fails by its exit status
	@$(if $(GPU_VISIBLE),:,echo "nccl-test: no NVIDIA GPU here (nvidia-smi lists none)" >&2; exit 1)
	$(IMAGE_OR_BUILD)
	@n=$$(nvidia-smi -L | grep -c '^GPU '); \
	$(DOCKER) run --rm --gpus all --shm-size=8g --ulimit memlock=-1 $(IMAGE):$(TAG) bash -c \
		'if [ -e /opt/nccl-tests/NOT-BUILT ]; then cat /opt/nccl-tests/NOT-BUILT >&2; exit 1; fi; \
		 exec all_reduce_perf -b 8 -e 256M -f 2 -c 1 -g '"$$n"

test-gpu: $(DEV_STAMP) ## GPU tests and Horovod's suites with NCCL, one rank per GPU, on $(IMAGE):$(TAG) (built if missing where GPUs are; skip without GPUs)
	$(if $(GPU_VISIBLE),$(IMAGE_OR_BUILD))
	BYOC_IMAGE=$(IMAGE):$(TAG) $(PY) -m pytest -m gpu tests/gpu $(PYTEST_ARGS)

shell: engine ## An interactive shell in $(IMAGE):$(TAG) (built if missing)
	$(IMAGE_OR_BUILD)
	$(DOCKER) run --rm -it --shm-size=1g $(IMAGE):$(TAG) bash

dev: engine ## Development container of $(IMAGE):$(TAG) (built if missing) as you: Jupyter on 8888 (the getting-started notebook), SSH on 2222 (your ~/.ssh key), TensorBoard on 6006; notebooks in local/dev, this checkout at /workspace/repo
	$(IMAGE_OR_BUILD)
	@mkdir -p "$(DEV_WORKSPACE)/repo"
	$(DOCKER) run --rm -it --shm-size=8g $(if $(GPU_VISIBLE),--gpus all) \
		-p $(DEV_BIND):$(JUPYTER_HOST_PORT):8888 -p $(DEV_BIND):$(SSH_HOST_PORT):22 \
		-p $(DEV_BIND):$(TENSORBOARD_HOST_PORT):6006 \
		$(if $(DEV_KEYS),-v $(DEV_KEYS):/etc/byoc/authorized_keys:ro) $(DEV_USER_ARGS) \
		-v "$(DEV_WORKSPACE)":/workspace -v "$(CURDIR)":/workspace/repo $(DEV_ARGS) $(IMAGE):$(TAG)

cluster-up: engine ## Local cluster: NODES (default 2) dev containers of $(IMAGE):$(TAG) (built if missing) that horovodrun across
	$(IMAGE_OR_BUILD)
	@scripts/cluster.sh up $(NODES)

cluster-scale: ## While a job runs: the local cluster grows or shrinks to NODES nodes (elastic jobs follow), of the image it was started with
	@scripts/cluster.sh scale $(NODES)

cluster-shell: ## A shell on node0 of the local cluster
	@scripts/cluster.sh shell

cluster-down: ## Stop the local cluster and delete its key
	@scripts/cluster.sh down

slurm-up: engine ## A Slurm cluster (slurmctld + NODES slurmd) of $(IMAGE):$(TAG) (built if missing) with Slurm added in a test layer; docs/slurm.md
	$(IMAGE_OR_BUILD)
	@scripts/slurm.sh up $(NODES)

slurm-down: ## Remove the Slurm cluster and its keys
	@scripts/slurm.sh down

push: $(DEV_STAMP) engine ## Push $(IMAGE):$(TAG) (built if missing) to ECR repository $(ECR_REPOSITORY) (made if missing), print the image_uri
	$(IMAGE_OR_BUILD)
	$(PY) -m hostkit.aws.push --image $(IMAGE):$(TAG) --repository $(ECR_REPOSITORY) $(PUSH_ARGS)

launch: $(DEV_STAMP) ## Create a SageMaker training job: make launch ARGS="--image-uri URI --role ARN --instance-type ml.g5.12xlarge ..." (--instance-groups, --keep-alive-seconds, --training-plan-arn, --remote-debug)
	$(PY) -m hostkit.aws.launch $(ARGS)

clean: ## Remove the dev venv and the build-context wheelhouse and sources
	rm -rf $(VENV)
	find .wheelhouse .sources -mindepth 1 ! -name README.md -delete
