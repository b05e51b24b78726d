# pipeline on a CUDA runtime image. The NVIDIA driver comes from the host (docker run --gpus all, through the
# NVIDIA Container Toolkit); CuPy's [ctk] extra brings NVRTC and the CUDA libraries from PyPI, so the image adds
# only Python.
#
#   docker build -t pipeline-gpu-video .
#   docker run --rm --gpus all --user "$(id -u):$(id -g)" -v "$PWD:/data" pipeline-gpu-video \
#       run clip.mp4 --config denoise -o clip_denoised.mp4
#
# The default is for a CUDA 13 driver (580 or newer). For a CUDA 12 one:
#   docker build -t pipeline-gpu-video --build-arg CUDA_IMAGE=nvidia/cuda:12.6.3-runtime-ubuntu24.04 \
#       --build-arg EXTRA=cuda12 .
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04
FROM ${CUDA_IMAGE}
ARG EXTRA=cuda13

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
# Ubuntu's Python is externally managed (PEP 668): the package gets a venv of its own.
RUN python3 -m venv /opt/pipeline
# CuPy caches the compiled kernels in CUPY_CACHE_DIR: writable whatever --user the container runs as.
ENV PATH=/opt/pipeline/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    CUPY_CACHE_DIR=/tmp/cupy_kernel_cache

COPY pyproject.toml README.md LICENSE /src/
COPY pipeline /src/pipeline
RUN pip install --no-cache-dir "/src[${EXTRA}]" && rm -rf /src

WORKDIR /data
ENTRYPOINT ["pipeline"]
CMD ["--help"]
