"""``lut3d``: colour grading with a 3D LUT from an Adobe/Resolve ``.cube`` file, trilinear interpolation.

The table is parsed once when the chain is built (so a bad file is a config error before any decoding)
and uploaded to the device once, on the first frame; each frame is then one kernel.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..textfile import read_text
from ..gpu.cuda import cupy, f32, i32, launch_2d
from ..gpu.kernels import kernel, load
from .registry import Filter, Param, register_filter

_F = np.float32
MAX_SIZE = 256
# A 256-point table written with 6 decimals is about 480 MiB; past this, a file is not a LUT (/dev/zero).
MAX_FILE_BYTES = 512 << 20


@dataclass(frozen=True)
class CubeLut:
    """A parsed .cube file. ``table[b, g, r]`` is the RGB output at grid point (r, g, b) (red varies fastest)."""

    table: np.ndarray  # (N, N, N, 3) float32
    domain_min: np.ndarray  # (3,) float32
    domain_max: np.ndarray
    title: str = ""

    @property
    def size(self) -> int:
        return self.table.shape[0]


_UNDERSCORED = re.compile(r"[0-9]_")
MAX_VALUE = 1e6  # a LUT's inputs and outputs are colours: about 0 to 1, HDR ones a few hundred at most


def _is_float(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _floats(path: Path, lineno: int, words: list[str], count: int) -> list[float]:
    if len(words) != count:
        raise ConfigError(f"{path}:{lineno}: expected {count} numbers, got {' '.join(words)!r}")
    try:
        values = [float(w) for w in words]
    except ValueError:
        raise ConfigError(f"{path}:{lineno}: expected numbers, got {' '.join(words)!r}") from None
    if not all(math.isfinite(v) for v in values):  # NaN would pass the domain check and poison the table
        raise ConfigError(f"{path}:{lineno}: expected finite numbers, got {' '.join(words)!r}")
    # Past float32's range a value becomes infinity, and the interpolation's differences NaN.
    if not all(abs(v) <= MAX_VALUE for v in values):
        raise ConfigError(f"{path}:{lineno}: expected numbers from {-int(MAX_VALUE)} to {int(MAX_VALUE)}, "
                          f"got {' '.join(words)!r}")
    return values


def _size(path: Path, lineno: int, words: list[str]) -> int:
    try:
        (size,) = (int(w) for w in words)
    except ValueError:
        raise ConfigError(f"{path}:{lineno}: LUT_3D_SIZE needs one integer, got {' '.join(words)!r}") from None
    if not 2 <= size <= MAX_SIZE:
        raise ConfigError(f"{path}:{lineno}: LUT_3D_SIZE must be 2 to {MAX_SIZE}, got {size}")
    return size


def parse_cube(path: str | Path) -> CubeLut:
    """Read a .cube 3D LUT; every problem is a :class:`ConfigError` naming the file and line."""
    path = Path(path)
    text = read_text(path, MAX_FILE_BYTES, "lut3d")
    size, title, rows = None, "", []
    lo, hi = [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]
    # int() and float() read other scripts' digits and 1_0 (see pipeline/numbers.py); looked for line by
    # line only where the file holds such characters at all, as a million-row LUT is read in seconds.
    suspect = not text.isascii() or _UNDERSCORED.search(text) is not None
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line.startswith("TITLE"):  # a title may hold a '#'
            line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key = line.split(None, 1)[0]
        rest = line[len(key):]
        words = rest.split()
        numbers = line if not key[0].isalpha() else rest
        if suspect and key != "TITLE" and (not numbers.isascii() or "_" in numbers):
            raise ConfigError(f"{path}:{lineno}: expected numbers in ASCII digits, got {numbers.strip()!r}")
        if key == "TITLE":
            title = rest.strip().strip('"')
        elif key == "LUT_3D_SIZE":
            size = _size(path, lineno, words)
        elif key == "DOMAIN_MIN":
            lo = _floats(path, lineno, words, 3)
        elif key == "DOMAIN_MAX":
            hi = _floats(path, lineno, words, 3)
        elif key == "LUT_3D_INPUT_RANGE":  # Resolve's spelling of one domain for all channels
            a, b = _floats(path, lineno, words, 2)
            lo, hi = [a] * 3, [b] * 3
        elif key == "LUT_1D_SIZE":
            raise ConfigError(f"{path}:{lineno}: 1D LUTs are not supported; lut3d needs LUT_3D_SIZE")
        elif key[0].isalpha() and not _is_float(key):  # nan and inf are numbers: refused as such by _floats
            raise ConfigError(f"{path}:{lineno}: unknown keyword {key!r}")
        else:
            rows.append(_floats(path, lineno, line.split(), 3))
    return _check_cube(path, size, rows, lo, hi, title)


def _check_cube(path: Path, size, rows, lo, hi, title) -> CubeLut:
    if size is None:
        raise ConfigError(f"{path}: no LUT_3D_SIZE line; is this a 3D .cube file?")
    if len(rows) != size**3:
        raise ConfigError(f"{path}: LUT_3D_SIZE {size} needs {size**3} rows of R G B, found {len(rows)}")
    lo_a, hi_a = np.array(lo, _F), np.array(hi, _F)
    if np.any(hi_a <= lo_a):
        raise ConfigError(f"{path}: DOMAIN_MAX {hi} must exceed DOMAIN_MIN {lo} in every channel")
    with np.errstate(over="ignore", divide="ignore"):
        scale = _F(size - 1) / (hi_a - lo_a)  # as the kernel computes it: a domain too narrow overflows
    if not np.all(np.isfinite(scale)):
        raise ConfigError(f"{path}: the domain from DOMAIN_MIN {lo} to DOMAIN_MAX {hi} is too narrow "
                          "for single-precision numbers")
    table = np.array(rows, _F).reshape(size, size, size, 3)
    return CubeLut(np.ascontiguousarray(table), lo_a, hi_a, title)


def write_cube(path: str | Path, table: np.ndarray, title: str = "", digits: int = 6, comment: str = "") -> None:
    """Write ``table[b, g, r] = (R, G, B)`` as a .cube file (domain [0, 1])."""
    n = table.shape[0]
    lines = [f"# {c}" for c in comment.splitlines()]
    lines += [f'TITLE "{title}"'] if title else []
    lines += [f"LUT_3D_SIZE {n}", "DOMAIN_MIN 0 0 0", "DOMAIN_MAX 1 1 1"]
    lines += [" ".join(f"{v:.{digits}f}" for v in rgb) for rgb in table.reshape(-1, 3)]
    Path(path).write_text("\n".join(lines) + "\n")


def identity_table(size: int) -> np.ndarray:
    grid = np.linspace(0, 1, size, dtype=np.float64)
    b, g, r = np.meshgrid(grid, grid, grid, indexing="ij")
    return np.stack([r, g, b], axis=-1).astype(_F)


def _coords(v: np.ndarray, lo: np.float32, scale: np.float32, n: int):
    """Grid cell and fraction along one axis, clamped to the domain (same float32 steps as the kernel)."""
    t = np.clip((v - lo) * scale, _F(0), _F(n - 1))
    i0 = np.minimum(np.floor(t), _F(n - 2)).astype(np.int32)
    return i0, t - i0.astype(_F)


def apply_lut_cpu(lut: CubeLut, src: np.ndarray, dst: np.ndarray) -> None:
    """Trilinear lookup of every pixel, clamped to [0, 1]. Interpolates along r, then g, then b."""
    n, t = lut.size, lut.table
    scale = _F(n - 1) / (lut.domain_max - lut.domain_min)
    (ri, rf), (gi, gf), (bi, bf) = (_coords(src[c], lut.domain_min[c], scale[c], n) for c in range(3))
    rf, gf, bf = rf[..., None], gf[..., None], bf[..., None]

    def lerp_r(bb, gg):
        a = t[bb, gg, ri]
        return a + rf * (t[bb, gg, ri + 1] - a)

    def lerp_g(bb):
        a = lerp_r(bb, gi)
        return a + gf * (lerp_r(bb, gi + 1) - a)

    lo = lerp_g(bi)
    out = lo + bf * (lerp_g(bi + 1) - lo)  # (H, W, 3)
    np.clip(np.moveaxis(out, -1, 0), 0, 1, out=dst)


_LUT_SRC = r"""
__device__ __forceinline__ void cell(float v, float lo, float scale, int n, int* i0, float* f) {
    float t = fminf(fmaxf(__fmul_rn(__fsub_rn(v, lo), scale), 0.f), (float)(n - 1));
    float fl = fminf(floorf(t), (float)(n - 2));
    *i0 = (int)fl;
    *f = __fsub_rn(t, fl);
}
__device__ __forceinline__ float lerp(float a, float b, float f) { return __fadd_rn(a, __fmul_rn(f, __fsub_rn(b, a))); }

// table: (n, n, n, 4) floats indexed [b][g][r][channel], the 4th channel padding: one 16-byte load per
// corner (8 a pixel) instead of 24 scalar gathers.
extern "C" __global__ void @NAME@(const float* __restrict__ src, float* __restrict__ dst,
    const float4* __restrict__ table, int w, int h, int n,
    float lo_r, float lo_g, float lo_b, float sc_r, float sc_g, float sc_b)
{
    PIPELINE_XY(w, h)
    size_t np_ = (size_t)w * h;
    size_t i = (size_t)y * w + x;
    int ri, gi, bi;
    float rf, gf, bf;
    cell(src[i], lo_r, sc_r, n, &ri, &rf);
    cell(src[np_ + i], lo_g, sc_g, n, &gi, &gf);
    cell(src[2 * np_ + i], lo_b, sc_b, n, &bi, &bf);
    float4 gb[2];
    #pragma unroll
    for (int db = 0; db < 2; ++db) {
        float4 rg[2];
        #pragma unroll
        for (int dg = 0; dg < 2; ++dg) {
            size_t base = ((size_t)(bi + db) * n + (gi + dg)) * n + ri;
            float4 a = __ldg(&table[base]), b = __ldg(&table[base + 1]);
            rg[dg] = make_float4(lerp(a.x, b.x, rf), lerp(a.y, b.y, rf), lerp(a.z, b.z, rf), 0.f);
        }
        gb[db] = make_float4(lerp(rg[0].x, rg[1].x, gf), lerp(rg[0].y, rg[1].y, gf), lerp(rg[0].z, rg[1].z, gf), 0.f);
    }
    dst[i] = clamp01(lerp(gb[0].x, gb[1].x, bf));
    dst[np_ + i] = clamp01(lerp(gb[0].y, gb[1].y, bf));
    dst[2 * np_ + i] = clamp01(lerp(gb[0].z, gb[1].z, bf));
}
"""


@register_filter("lut3d")
class Lut3d(Filter):
    help = ("Apply a 3D LUT from a .cube file (trilinear); the path is relative to the working directory, "
            "or in a config file to that file.")
    params = (Param("file", str, "", is_path=True,
                    help="path to a .cube file with LUT_3D_SIZE (no ':' or ',' in it)"),)

    def __init__(self, **values):
        super().__init__(**values)
        if not self.file:
            raise ConfigError("lut3d: file is required, e.g. lut3d=file=luts/warm.cube")
        self.lut = parse_cube(self.file)
        self._device_tables: dict[int, object] = {}

    def cpu(self, src, dst, scratch):
        apply_lut_cpu(self.lut, src, dst)

    def _table(self):
        """The table on the current device, uploaded once; waits for the copy so every stream may read it."""
        cp = cupy()
        dev = cp.cuda.runtime.getDevice()
        table = self._device_tables.get(dev)
        if table is None:
            padded = np.zeros((*self.lut.table.shape[:3], 4), np.float32)  # RGB + padding: float4 loads
            padded[..., :3] = self.lut.table
            table = cp.asarray(padded)
            cp.cuda.get_current_stream().synchronize()
            self._device_tables[dev] = table
        return table

    def cuda(self, src, dst, scratch):
        _, h, w = src.shape
        lut = self.lut
        scale = _F(lut.size - 1) / (lut.domain_max - lut.domain_min)
        args = (src, dst, self._table(), i32(w), i32(h), i32(lut.size))
        args += tuple(f32(v) for v in lut.domain_min) + tuple(f32(v) for v in scale)
        launch_2d(self._kernel, w, h, args)

    def prepare(self):
        load(self._kernel)

    @functools.cached_property
    def _kernel(self):
        return kernel(_LUT_SRC, "pipeline_lut3d")
