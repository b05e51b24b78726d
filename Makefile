# Two entry points, each doing its own set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
SAMPLE := samples/sample.mp4
OUT    ?= out

# Add the CuPy matching the driver when nvidia-smi shows a GPU (CUDA 13 drivers take cupy-cuda13x).
CUDA_MAJOR := $(shell nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -n1)
CUDA_EXTRA := $(if $(CUDA_MAJOR),$(if $(filter 12,$(CUDA_MAJOR)),cuda12,cuda13),)
comma      := ,
EXTRAS     := test,bench$(if $(CUDA_EXTRA),$(comma)$(CUDA_EXTRA),)

.PHONY: demo test test-gpu bench-clips clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

demo: $(VENV)/.installed
	@mkdir -p $(OUT)
	$(VENV)/bin/pipeline run $(SAMPLE) -o $(OUT)/sample_processed.mp4 -y --stats-json $(OUT)/sample_stats.json
	@echo "output: $(OUT)/sample_processed.mp4 (statistics: $(OUT)/sample_stats.json)"

test: $(VENV)/.installed
	$(PY) -m pytest -m "not slow" -q

test-gpu: $(VENV)/.installed
	PIPELINE_REQUIRE_GPU=1 $(PY) -m pytest -m gpu -q

bench-clips: $(VENV)/.installed
	$(VENV)/bin/pipeline sample 1080p
	$(VENV)/bin/pipeline sample 4k
	$(VENV)/bin/pipeline sample raw1080p

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache
