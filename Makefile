# The README's commands. Each target creates .venv and installs everything from scratch when it is
# missing; torch is pinned and installed first so that no other package pulls a different build.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_OUT ?= demo_out

.PHONY: venv vllm-venv demo test test-fast lint browser bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/vlbench demo --out $(DEMO_OUT)

# The vLLM tests run a real vLLM (its CPU build) from a second venv that scripts/vllm_venv.sh builds beside
# the main one, outside the checkout and cached between runs; the main venv is never touched by it.
test: lint browser
	py="$$(bash scripts/vllm_venv.sh)" && VLBENCH_VLLM_PYTHON="$$py" $(PY) -m pytest -q

vllm-venv:
	bash scripts/vllm_venv.sh

# Debian's chromium for the leaderboard page test (playwright drives it; no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } \
		|| echo "note: could not install chromium; the leaderboard's browser test will be skipped"

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Every bench runs even when one misses its target; the target fails if any did. Each measure is
# also appended to BENCH_RESULTS, and the run ends with their table (scripts/summarise_benches.py).
BENCHES := $(sort $(wildcard scripts/bench_*.py))
BENCH_RESULTS ?= bench_results.jsonl
bench: $(STAMP)
	@rm -f $(BENCH_RESULTS); failed=""; \
	vllm_python="$$(bash scripts/vllm_venv.sh)" || exit 1; \
	for b in $(BENCHES); do echo "== $$b"; VLBENCH_BENCH_RESULTS=$(BENCH_RESULTS) VLBENCH_VLLM_PYTHON=$$vllm_python \
		$(PY) $$b || failed="$$failed $$b"; done; \
	echo; $(PY) scripts/summarise_benches.py $(BENCH_RESULTS); \
	if [ -n "$$failed" ]; then echo "missed a target:$$failed"; exit 1; fi

clean:
	rm -rf $(VENV) $(DEMO_OUT) $(BENCH_RESULTS)
