# mens — every target creates/uses .venv in the repo root. `make help` lists them.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PYTHON ?= python3
# torch is installed first, pinned, so that the project's `torch>=2.13` is already satisfied:
#  - Linux: `pip install torch==2.13.0` (this workplace's pip takes the CPU wheel from local
#    disk; elsewhere PyPI serves the CUDA build, right for NVIDIA machines). For a CPU-only
#    wheel elsewhere: make install TORCH_INDEX=https://download.pytorch.org/whl/cpu
#  - macOS: PyPI's wheel, with MPS.
TORCH_VERSION ?= 2.13.0
TORCH_INDEX ?=
# llama-cpp-python (dev extra) builds llama.cpp from source. -march=native would compile its AMX
# kernels on CPUs that have AMX, and those segfault in q8_0 / K-quant decoding in sandboxes
# that do not grant AMX tile state (seen on this project's machines): a portable AVX2 build.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
STAMP := $(VENV)/.mens-installed
SKY_VENV ?= .venv-sky
SKY_VERSION ?= 0.14.1
ARGS ?=
# the suites run on 2 pytest-xdist workers (a 2-core box spends much of a test in single-threaded
# Python: composing, imports, subprocesses); one file per worker, so a module's fixtures are made
# once. TEST_JOBS=0 runs them in this process, one after another. Each worker's torch gets one
# intra-op thread (unless OMP_NUM_THREADS says otherwise): two workers' second threads on two
# cores only spin-wait (tiny models: ~10x slower per op, tests/export/test_export.py).
TEST_JOBS ?= 2
XDIST := $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile)
TEST_ENV := $(if $(filter 0,$(TEST_JOBS)),,OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1})

.PHONY: help install run plan test test-slow test-learn test-full bench clean export serve eval compare demo push docs

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

install: $(STAMP) ## create .venv and install mens with its dev extras

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	@$(PY) -c "import torch" 2>/dev/null || \
	  $(PIP) install -q torch==$(TORCH_VERSION) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	@# the distribution was called `mens` before it became mens-compiler (PyPI's mens is another
	@# project): an older editable install of this checkout under that name goes first
	@$(PY) -c "import importlib.metadata as m; m.distribution('mens')" 2>/dev/null && \
	  $(PIP) uninstall -q -y mens || true
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) install -q -e '.[dev]'
	@# SkyPilot (mens-compiler[cloud]) pins click<8.2, which huggingface_hub and wandb outgrew: the tests
	@# parse `mens cloud launch`'s YAML with SkyPilot's own parser in a venv of its own
	@test -x $(SKY_VENV)/bin/python || $(PYTHON) -m venv $(SKY_VENV)
	@$(SKY_VENV)/bin/python -c "import sky" 2>/dev/null || \
	  $(SKY_VENV)/bin/pip install -q skypilot==$(SKY_VERSION) > $(SKY_VENV)/install.log 2>&1 || \
	  (tail -5 $(SKY_VENV)/install.log; echo "make: SkyPilot did not install: the sky.yaml tests will skip (saying so)")
	@touch $(STAMP)

run: install ## the main job: compile, plan and train the embedded tiny default (ARGS=overrides)
	$(PY) -m mens $(ARGS)

plan: install ## plan only, e.g. make plan ARGS="+hw=rtx4090 +rung=8b"
	$(PY) -m mens.plan $(ARGS)

test: install ## the test suite (CPU only, skips tests marked slow)
	$(TEST_ENV) $(PY) -m pytest -q -m "not slow" $(XDIST) $(ARGS)

test-slow: install ## the slow acceptance tests only (FSDP2/DDP runs, resume after SIGKILL, browser round trip, gates, wheel installs, fuzzing): CI runs them after `make test`
	$(TEST_ENV) $(PY) -m pytest -q -m "slow and not learning" --durations=15 $(XDIST) $(ARGS)

test-learn: install ## the RL/distillation learning runs (GRPO bandit on 3 seeds, reward-hacking control, arithmetic and its shuffled control, distillation; ~40 min on 2 cores): outside CI's slow suite
	$(TEST_ENV) $(PY) -m pytest -q -m learning $(XDIST) $(ARGS)

test-full: install ## every test, slow ones included
	$(TEST_ENV) $(PY) -m pytest -q $(XDIST) $(ARGS)

bench: install ## benchmarks: plan start-up, train throughput, padding, export memory, held-out memory errors
	$(PY) tools/bench/bench.py $(ARGS)

export: install ## merged model, GGUFs, GGUF adapter, Modelfile of a run: make export RUN=<run dir> [ARGS=...]
	@test -n "$(RUN)" || { echo "make export RUN=<run dir>  (a finished run, e.g. outputs/<date>/<time>_train)"; exit 2; }
	$(PY) -m mens.export run=$(RUN) $(ARGS)

push: install ## a run's adapter + evidence card (+ GGUFs) to the Hugging Face Hub (HF_TOKEN in the env): make push RUN=<run dir> REPO=<org/name> [ARGS=push.gguf=true]
	@test -n "$(RUN)" -a -n "$(REPO)" || { echo "make push RUN=<run dir> REPO=<org/name>  (ARGS=push.dry_run=true: write <run dir>/push/ and upload nothing)"; exit 2; }
	$(PY) -m mens.push run=$(RUN) push.repo=$(REPO) $(ARGS)

serve: install ## OpenAI-compatible server on 127.0.0.1:8089: make serve RUN=<run dir> [ARGS=...]
	$(PY) -m mens.serve $(if $(RUN),run=$(RUN)) $(ARGS)

eval: install ## did it help? benchmarks, oracle pass@k, collateral, judge with intervals: make eval RUN=<run dir> [ARGS=...]
	$(PY) -m mens.eval $(if $(RUN),run=$(RUN)) $(ARGS)

compare: install ## base vs fine-tuned (RUN=<run dir>) or across runs (RUNS="<dirs or globs>")
	$(PY) -m mens.compare $(if $(RUN),run=$(RUN)) $(RUNS) $(ARGS)

demo: install ## train the tiny default (or reuse the last run), serve base + adapter, ask both
	$(PY) -m mens.cli.demo $(ARGS)

docs: install ## the docs site into site/ (mkdocs-material; --strict: a broken link or a missing page fails), reference pages generated from the code
	DISABLE_MKDOCS_2_WARNING=true NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

clean: ## remove run outputs (keeps .venv)
	rm -rf outputs/20* outputs/multirun .pytest_cache site

# --- calibration (issue #4): records of measured peaks → fitted cells of conf/contract.yaml ---
.PHONY: calibrate calibrate-gpu fit
ifndef CALIB_DIR
CALIB_DIR := outputs/calibration/$(shell date +%Y-%m-%d_%H-%M-%S)
endif
CALIB_FIT := calib_cpu calib_cpu_0.6b_l8 calib_cpu_0.6b calib_cpu_repeat
CALIB_HELD := calib_cpu_heldout calib_cpu_heldout_0.6b calib_cpu_heldout_1.7b calib_cpu_heldout_wide calib_cpu_heldout_long

calibrate: install ## CPU calibration sweeps, fit + held-out shapes (hours on 2 cores), then a fit check
	@rc=0; for r in $(CALIB_FIT) $(CALIB_HELD); do \
	  $(PY) -m mens.calibrate -m +recipe=$$r hydra.sweep.dir=$(CALIB_DIR)/$$r $(ARGS) || rc=$$?; \
	done; \
	$(PY) -m mens.fit "calibrate.records=[$(CALIB_DIR)]" calibrate.check=true \
	  calibrate.report=$(CALIB_DIR)/report hydra.run.dir=$(CALIB_DIR)/fit || rc=$$?; \
	echo "records: $(CALIB_DIR); commit them with: make fit ARGS=\"calibrate.records=[$(CALIB_DIR)] calibrate.save_records=calibration/cpu.jsonl\""; \
	exit $$rc

calibrate-gpu: install ## one CUDA GPU, ≤ 10 min: the CUDA cells, 0.6b to the largest rung that fits (ARGS="--dry-run --tier h200" plans only)
	$(PY) -m mens.cli.calibrate_gpu $(ARGS)

fit: install ## fit the contract from calibration records + report (default: the committed CPU records)
	$(PY) -m mens.fit $(ARGS)
