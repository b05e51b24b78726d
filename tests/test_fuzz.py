"""Seeded byte flips and truncations of a small valid clip: only the contract is checked.

Exit 0 (damage survived, an output written) or 3 (bad input, nothing written); never a crash, a
traceback, a hang or a leftover file. A few cases run by default; ``-m slow`` runs a few hundred.
Each case runs the CLI as a subprocess, so a crash inside FFmpeg shows as a failing return code.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from utils import partials, remux, run_pipeline

from pipeline.sample import make_clip

ALLOWED = {0, 3}
TIMEOUT_S = 60  # a 20-frame clip takes well under a second; anything near this is a hang
QUICK, SLOW = 6, 300


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz_seeds")
    mp4 = make_clip(d / "seed.mp4", width=160, height=96, frames=20, audio=True)
    return {
        ".mp4": mp4.read_bytes(),
        ".mkv": make_clip(d / "seed.mkv", width=160, height=96, frames=20, audio=True).read_bytes(),
        # MPEG-TS: no index, resynchronising demuxer, 33-bit timestamps, ADTS audio: other failure modes.
        ".ts": remux(mp4, d / "seed.ts").read_bytes(),
    }


def mutate(data: bytes, rng: random.Random) -> bytes:
    """Flip some bytes, cut the file, or both; the header region is hit as often as the payload."""
    out = bytearray(data)
    kind = rng.choice(("flip", "cut", "both", "flip-head"))
    if kind in ("flip", "both", "flip-head"):
        span = min(len(out), 512) if kind == "flip-head" else len(out)
        for _ in range(rng.randint(1, 64)):
            out[rng.randrange(span)] ^= 1 << rng.randrange(8)
    if kind in ("cut", "both"):
        del out[rng.randrange(1, len(out)):]
    return bytes(out)


def check_case(tmp_path: Path, seeds: dict[str, bytes], seed: int) -> None:
    rng = random.Random(seed)
    suffix = rng.choice(sorted(seeds))
    src = tmp_path / f"fuzz{seed}{suffix}"
    src.write_bytes(mutate(seeds[suffix], rng))
    out = tmp_path / f"out{seed}.mp4"
    result = run_pipeline(src, "-o", out, "--filters", "eq=contrast=1.1", cwd=tmp_path, timeout=TIMEOUT_S)
    where = f"seed {seed} ({src.name}): rc {result.returncode}\n{result.stderr}"
    assert result.returncode in ALLOWED, where
    assert "Traceback" not in result.stderr, where
    assert partials(tmp_path) == [], where
    if result.returncode == 0:
        assert out.exists() and out.stat().st_size > 0, where
    else:
        errors = [line for line in result.stderr.splitlines() if line.startswith("pipeline: error:")]
        assert len(errors) == 1 and result.stderr.strip().endswith(errors[0]), where
        assert not out.exists(), where
    src.unlink()
    out.unlink(missing_ok=True)


@pytest.mark.parametrize("seed", range(QUICK))
def test_fuzz_quick(tmp_path, seeds, seed):
    check_case(tmp_path, seeds, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(QUICK, QUICK + SLOW))
def test_fuzz_many(tmp_path, seeds, seed):
    check_case(tmp_path, seeds, seed)


@pytest.mark.parametrize("content, words", [
    (b"YUV4MPEG2 W100000 H100000 F25:1 C420jpeg\nFRAME\n" + b"x" * 100, "Picture size 100000x100000 is invalid"),
    (b"\0\0\0\x18ftypisom" + b"x" * 200, "moov atom not found"),
], ids=["y4m-huge-size", "mp4-no-index"])
def test_an_input_that_cannot_be_opened_says_what_ffmpeg_found(tmp_path, content, words):
    """FFmpeg's own words first: the error code alone misled ("Device or resource busy" for the size)."""
    from utils import one_error

    src = tmp_path / ("in.y4m" if content.startswith(b"YUV4") else "in.mp4")
    src.write_bytes(content)
    line = one_error(run_pipeline(src, "-o", tmp_path / "out.mkv", cwd=tmp_path), 3, "cannot open as video", words)
    assert "Errno" not in line and "file:" not in line
