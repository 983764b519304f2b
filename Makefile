# The README's commands. Each target creates .venv and installs everything from scratch when it is
# missing, from requirements.lock: every package (the test extras included) at one version, checked
# against its sha256. That is the environment that builds published datasets; a build's manifest
# records the versions that shape its bytes.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_OUT ?= demo_out
LOCK := requirements.lock

.PHONY: venv vllm-venv lmms-eval-env inspect-env lock demo test test-fast durations lint docs browser postgres nginx bench clean

$(STAMP): pyproject.toml $(LOCK)
	rm -f $(STAMP)
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --require-hashes --no-deps -r $(LOCK)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	$(PY) -m pip check
	touch $(STAMP)

# Resolves pyproject.toml's dependencies (and the test and docs extras) into
# requirements.lock, with every file's sha256, for CPython 3.11 on x86-64 Linux, keeping the versions it already
# pins (uv prefers them; delete a line to let that package move to its newest version). torch is the CPU
# build (torch==$(TORCH)), a wheel in $(TORCH_WHEELS) on this workplace's machines: PyPI's torch
# brings several GB of CUDA packages. uv runs from its own venv, never the project's.
LOCK_TOOLS := .venv-lock
TORCH := 2.13.0+cpu
TORCH_WHEELS ?= /opt/wheels
lock:
	test -x $(LOCK_TOOLS)/bin/uv || { python3 -m venv $(LOCK_TOOLS) && $(LOCK_TOOLS)/bin/pip install -q uv==0.13.9; }
	printf 'torch==$(TORCH)\n' > $(LOCK_TOOLS)/constraints.txt
	$(LOCK_TOOLS)/bin/uv pip compile -q pyproject.toml --extra test --extra docs --generate-hashes --find-links $(TORCH_WHEELS) \
		--constraint $(LOCK_TOOLS)/constraints.txt --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
		--custom-compile-command "make lock" --output-file $(LOCK)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/vlbench demo --out $(DEMO_OUT)

# The vLLM tests run a real vLLM (its CPU build) from a second venv that scripts/vllm_venv.sh builds beside
# the main one, outside the checkout and cached between runs; the main venv is never touched by it. The
# exported-task tests run the real lmms-eval 0.7.3 and Inspect, each installed by scripts/harness_env.sh into a
# cached folder beside the main venv (run with its python, never installed into it). The three are made at once,
# while the lint, the docs and the system packages are done (each script prints its folder, cached: a later run
# only finds it); every one must succeed. The tests run in two worker processes (pytest-xdist), each file's tests
# in one of them (`--dist loadfile`: a module's fixtures, its servers and clusters, start once), the longest files
# first (tests/conftest.py reads tests/durations.json; `make durations` writes it from the last run's report),
# each worker's torch given its share of the cores (conftest.py sets OMP_NUM_THREADS where it is not set).
TOOLS := $(VENV)/.tools
test: $(STAMP)
	mkdir -p $(TOOLS)
	bash scripts/vllm_venv.sh > $(TOOLS)/vllm & v=$$!; \
		bash scripts/harness_env.sh lmms-eval $(PY) > $(TOOLS)/lmms-eval & l=$$!; \
		bash scripts/harness_env.sh inspect $(PY) > $(TOOLS)/inspect & i=$$!; \
		$(MAKE) --no-print-directory lint docs browser postgres nginx; s=$$?; \
		wait $$v; a=$$?; wait $$l; b=$$?; wait $$i; c=$$?; test "$$s$$a$$b$$c" = 0000
	VLBENCH_VLLM_PYTHON="$$(tail -1 $(TOOLS)/vllm)" VLBENCH_LMMS_EVAL="$$(tail -1 $(TOOLS)/lmms-eval)" \
		VLBENCH_INSPECT="$$(tail -1 $(TOOLS)/inspect)" $(PY) -m pytest -q -n 2 --dist loadfile \
		--no-loadscope-reorder --durations=25 --junitxml=$(TOOLS)/junit.xml

durations: $(STAMP)
	$(PY) scripts/test_durations.py $(TOOLS)/junit.xml

vllm-venv:
	bash scripts/vllm_venv.sh

lmms-eval-env: $(STAMP)
	@bash scripts/harness_env.sh lmms-eval $(PY)

inspect-env: $(STAMP)
	@bash scripts/harness_env.sh inspect $(PY)

# Debian's chromium for the leaderboard page test (playwright drives it; no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } \
		|| echo "note: could not install chromium; the leaderboard's browser test will be skipped"

# Debian's PostgreSQL server for the challenge service's tests on PostgreSQL (a fixture initialises, starts and
# stops a cluster of its own in a temporary folder, listening on loopback only).
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null; } \
		|| echo "note: could not install postgresql; the service's PostgreSQL tests will be skipped"

# Debian's nginx for the test that runs the challenge guide's reverse-proxy block in front of the service (a
# fixture starts it on loopback with a configuration of its own in a temporary folder; the package's own server is
# never started).
nginx:
	@command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx >/dev/null; } \
		|| echo "note: could not install nginx; the reverse-proxy test will be skipped"

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The documentation site (mkdocs.yml): --strict fails on a broken link, a page left out of the navigation
# or a missing reference (never --quiet: it hides the warnings --strict counts, and the build passes). The CLI
# reference and the parameter tables are generated at build time.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

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
	rm -rf $(VENV) $(LOCK_TOOLS) $(DEMO_OUT) $(BENCH_RESULTS) site
