"""Packaging: the CuPy extra the Makefile picks for a driver, what the CUDA extras resolve to on the package
index (pip's dry run: `network`), and the wheel installed into a fresh environment (`slow`, `network`)."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from utils import ROOT, read_json, run_command, video_frames

# What pip says when the index cannot be reached (urllib3's errors, resolver and socket messages).
OFFLINE = ("NewConnectionError", "ConnectTimeoutError", "Failed to establish a new connection", "ProxyError",
           "Temporary failure in name resolution", "Name or service not known", "Network is unreachable",
           "No route to host", "Connection refused", "ReadTimeoutError", "Max retries exceeded")


def clean_env() -> dict[str, str]:
    """This environment without what points Python at the checkout (PYTHONPATH would make pip take the
    checkout's metadata for an installed copy)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def pip(python: str | Path, *args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [str(python), "-m", "pip", *args, "--disable-pip-version-check", "--retries", "2", "--timeout", "30"]
    return run_command(cmd, cwd=cwd, env=clean_env(), timeout=timeout)


def skip_if_offline(result: subprocess.CompletedProcess) -> None:
    if result.returncode != 0:
        text = result.stdout + result.stderr
        reason = next((line.strip() for line in text.splitlines() if any(e in line for e in OFFLINE)), None)
        if reason is not None:
            pytest.skip(f"package index unreachable: {reason[:200]}")


def project_copy(dest: Path) -> Path:
    """The project's files without the checkout's clutter, so that a build writes nothing into it."""
    ignore = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                    "out", "samples", "tests", "docs")
    return Path(shutil.copytree(ROOT, dest, ignore=ignore))


# --- scripts/cuda_extra.sh: the Makefile's choice of extra ----------------------------------------------------


def fake_nvidia_smi(bin_dir: Path, driver: str | None, cuda: str | None, fails: bool = False) -> None:
    """An nvidia-smi that answers the two questions the script asks, as a driver of that version would."""
    query = "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9" if fails \
        else f"printf '{driver}\\n'"
    header = "exit 9" if fails else f"echo '| NVIDIA-SMI {driver}   Driver Version: {driver}   CUDA Version: {cuda} |'"
    script = bin_dir / "nvidia-smi"
    script.write_text(f'#!/bin/sh\nif [ "$1" = "--query-gpu=driver_version" ]; then {query}; fi\n{header}\n')
    script.chmod(0o755)


def tools_only_path(tmp_path: Path) -> Path:
    """A PATH with the tools the script uses and no real nvidia-smi, whatever this machine has."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sed", "head"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return bin_dir


def cuda_extra(bin_dir: Path) -> subprocess.CompletedProcess:
    return run_command(["/bin/sh", ROOT / "scripts" / "cuda_extra.sh"], env={"PATH": str(bin_dir)}, timeout=30)


@pytest.mark.parametrize(
    "driver, cuda, extra",
    [
        ("580.159.04", "13.0", "cuda13"),
        ("590.44.01", "13.1", "cuda13"),
        ("575.57.08", "12.9", "cuda12"),
        ("525.60.13", "12.0", "cuda12"),
        ("535.104.05\\n535.104.05", "12.2", "cuda12"),  # two GPUs: one line each
        ("garbage", "12.4", "cuda12"),  # no usable driver version: the header's CUDA version decides
    ],
)
def test_cuda_extra_follows_the_driver(tmp_path, driver, cuda, extra):
    bin_dir = tools_only_path(tmp_path)
    fake_nvidia_smi(bin_dir, driver, cuda)
    result = cuda_extra(bin_dir)
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, extra, "")


@pytest.mark.parametrize("driver, cuda", [("470.256.02", "11.4"), ("garbage", "11.8")])
def test_a_driver_older_than_cuda_12_gets_the_cpu_backend_and_a_notice(tmp_path, driver, cuda):
    bin_dir = tools_only_path(tmp_path)
    fake_nvidia_smi(bin_dir, driver, cuda)
    result = cuda_extra(bin_dir)
    assert result.returncode == 0 and result.stdout == ""
    assert "CPU backend" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_no_gpu_gets_no_extra(tmp_path):
    bin_dir = tools_only_path(tmp_path)
    assert (cuda_extra(bin_dir).stdout, cuda_extra(bin_dir).stderr) == ("", "")  # no nvidia-smi at all
    fake_nvidia_smi(bin_dir, None, None, fails=True)  # nvidia-smi without a working driver
    result = cuda_extra(bin_dir)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_installs_cupy_once_a_gpu_appears(tmp_path):
    """One install stamp per set of extras: no 'make clean' needed when the driver changes."""
    bin_dir = tools_only_path(tmp_path)
    venv = tmp_path / "venv"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    def dry_run() -> str:
        return subprocess.run(["make", "-n", "test", f"VENV={venv}"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60, check=True).stdout

    if shutil.which("nvidia-smi") is None:  # this machine's own GPU would decide otherwise
        assert '-e ".[test,bench]"' in dry_run()
    fake_nvidia_smi(bin_dir, "580.159.04", "13.0")  # found before any real one
    plan = dry_run()
    assert '-e ".[test,bench,cuda13]"' in plan and f"touch {venv}/.installed-test-bench-cuda13" in plan
    venv.mkdir()
    (venv / ".installed-test-bench").touch()  # installed before the GPU came: still installs CuPy now
    assert '-e ".[test,bench,cuda13]"' in dry_run()


# --- what the CUDA extras resolve to ------------------------------------------------------------------------


@pytest.mark.network
@pytest.mark.skipif(sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"),
                    reason="CuPy's CUDA wheels are for Linux x86_64 and aarch64")
@pytest.mark.parametrize(
    "extra, cupy, nvrtc, major",
    [("cuda12", "cupy-cuda12x", "nvidia-cuda-nvrtc-cu12", "12"), ("cuda13", "cupy-cuda13x", "nvidia-cuda-nvrtc", "13")],
)
def test_cuda_extra_brings_nvrtc_from_the_index(tmp_path, extra, cupy, nvrtc, major):
    """The kernels are compiled at run time by NVRTC: the extra must bring it, so the host needs only a driver."""
    src = project_copy(tmp_path / "src")
    report = tmp_path / "report.json"
    result = pip(sys.executable, "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                 f"{src}[{extra}]")
    skip_if_offline(result)
    assert result.returncode == 0, result.stderr
    resolved = {re.sub(r"[-_.]+", "-", i["metadata"]["name"]).lower(): i["metadata"]["version"]
                for i in read_json(report)["install"]}
    assert int(resolved[cupy].split(".")[0]) >= 14, resolved  # the first CuPy with the [ctk] extra
    assert resolved[nvrtc].split(".")[0] == major, resolved
    assert "opencv-python-headless" in resolved and "opencv-python" not in resolved


# --- the wheel, installed into a fresh environment ---------------------------------------------------------


def run(cmd: list, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    result = run_command(cmd, cwd=cwd, env=clean_env(), timeout=timeout)
    assert result.returncode == 0, f"{cmd}: {result.stdout}{result.stderr}"
    return result


@pytest.mark.slow
@pytest.mark.network
def test_wheel_installs_and_runs_from_anywhere(tmp_path):
    """Build the wheel, install it with its CPU dependencies from the index into a new venv, and use it from
    a directory that has nothing of the checkout: presets by name, the clip generator, the filter list."""
    src, dist, venv, work = project_copy(tmp_path / "src"), tmp_path / "dist", tmp_path / "venv", tmp_path / "work"
    built = pip(sys.executable, "wheel", "--no-deps", "-w", str(dist), str(src))
    skip_if_offline(built)
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("pipeline_gpu_video-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = pip(venv / "bin" / "python", "install", "--quiet", str(wheel), cwd=work.parent)
    skip_if_offline(installed)
    assert installed.returncode == 0, installed.stderr
    work.mkdir()
    exe = venv / "bin" / "pipeline"

    where = run([venv / "bin" / "python", "-c", "import pipeline; print(pipeline.__file__)"], work).stdout
    assert str(venv) in where and str(ROOT) not in where
    assert "samples/sample.mp4" in run([exe, "sample", "--frames", "12"], work).stdout
    run([exe, "run", "samples/sample.mp4", "--config", "denoise", "-o", "out.mp4", "-q"], work)
    run([exe, "run", "samples/sample.mp4", "--config", "grade", "-o", "graded.mp4", "-q", "--frames", "5"], work)
    listed = run([exe, "filters"], work).stdout
    assert "gblur" in listed and "lut3d" in listed
    assert {"gblur", "lut3d"} <= {f["name"] for f in json.loads(run([exe, "filters", "--json"], work).stdout)["filters"]}
    assert "denoise" in run([exe, "presets"], work).stdout
    assert len(video_frames(work / "out.mp4")) == 12
    assert len(video_frames(work / "graded.mp4")) == 5
