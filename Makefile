# The README's commands. Each target creates .venv and installs everything from scratch when it is
# missing; torch is pinned and installed first so that no other package pulls a different build.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_OUT ?= demo_out

.PHONY: venv demo test bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/vlbench demo --out $(DEMO_OUT)

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) scripts/bench_gqa_ood_build.py
	$(PY) scripts/bench_vcr_visor_build.py
	$(PY) scripts/bench_vqa_accuracy.py
	$(PY) scripts/bench_vqa_cp_regenerate.py
	$(PY) scripts/bench_perceptual.py
	$(PY) scripts/bench_counterbias_attack.py

clean:
	rm -rf $(VENV) $(DEMO_OUT)
