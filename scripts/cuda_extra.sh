#!/bin/sh
# Which CuPy extra this machine's NVIDIA driver takes: prints cuda13, cuda12, or nothing (no GPU, or a
# driver too old for CUDA 12: then a notice on stderr, and the CPU backend is installed).
#
# The extras' [ctk] CuPy brings NVRTC and the CUDA libraries from PyPI, so the driver is what matters:
# CUDA 13 needs a 580 driver or newer, CUDA 12 a 525 one (any 12.x runs on it: minor version compatibility).
# The driver version is asked for first; the "CUDA Version" that nvidia-smi's header shows is the fallback.
command -v nvidia-smi >/dev/null 2>&1 || exit 0
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 |
         sed -n 's/^[[:space:]]*\([0-9][0-9]*\)\..*/\1/p')
cuda=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\).*/\1/p' | head -n 1)
pick() {  # VERSION CUDA13_FROM CUDA12_FROM: print the extra and stop, or return for the caller to explain
    if [ "$1" -ge "$2" ]; then echo cuda13; exit 0; fi
    if [ "$1" -ge "$3" ]; then echo cuda12; exit 0; fi
}
if [ -n "$driver" ]; then
    pick "$driver" 580 525
    echo "NVIDIA driver $driver is too old for CUDA 12 (525 or newer is needed): installing without CuPy," \
         "the CPU backend only" >&2
    exit 0
fi
if [ -n "$cuda" ]; then
    pick "$cuda" 13 12
    echo "the NVIDIA driver supports CUDA $cuda only (12 or newer is needed): installing without CuPy," \
         "the CPU backend only" >&2
fi
exit 0
