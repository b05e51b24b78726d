#!/usr/bin/env bash
# The checks that need the GPU machine, in one go: the GPU tests (a missing GPU fails them), the README's
# Python API snippets and the examples on CUDA. Logs go to $OUT (or ./gpu-logs).
#   scripts/gpu_suite.sh [pytest args...]
set -uo pipefail
out=${OUT:-gpu-logs}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
export PIPELINE_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
# -v names each test as it starts and faulthandler prints every thread's stack after 240 s in one test: a hang
# shows where it is in the log (a child process that hangs prints its own: tests/utils.py run_command).
python3 -m pytest -v -m gpu -p no:cacheprovider --durations=15 -o faulthandler_timeout=240 "$@" 2>&1 \
    | tee "$out/gpu-tests.log" | grep -v " PASSED" | tail -40
python3 -m pytest -q -p no:cacheprovider tests/test_examples.py 2>&1 | tee "$out/examples.log" | tail -5
