# Two entry points, each doing its own set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
SAMPLE := samples/sample.mp4
OUT    ?= out

# CuPy for the NVIDIA driver, when nvidia-smi shows one (scripts/cuda_extra.sh: cuda13, cuda12, or none).
CUDA_EXTRA := $(shell sh scripts/cuda_extra.sh)
comma      := ,
EXTRAS     := test,bench$(if $(CUDA_EXTRA),$(comma)$(CUDA_EXTRA),)
# One stamp per set of extras: a GPU that appears later (or another driver) installs CuPy on the next make.
STAMP      := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: demo test test-gpu bench-clips clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	rm -f $(VENV)/.installed-*
	touch $@

demo: $(STAMP)
	@mkdir -p $(OUT)
	$(VENV)/bin/pipeline run $(SAMPLE) -o $(OUT)/sample_processed.mp4 -y --stats-json $(OUT)/sample_stats.json
	@echo "output: $(OUT)/sample_processed.mp4 (statistics: $(OUT)/sample_stats.json)"

test: $(STAMP)
	$(PY) -m pytest -m "not slow" -q

test-gpu: $(STAMP)
	PIPELINE_REQUIRE_GPU=1 $(PY) -m pytest -m gpu -q

bench-clips: $(STAMP)
	$(VENV)/bin/pipeline sample 1080p -y
	$(VENV)/bin/pipeline sample 4k -y
	$(VENV)/bin/pipeline sample raw1080p -y

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache
