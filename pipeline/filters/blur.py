"""Separable Gaussian blur (``gblur``): a horizontal and a vertical pass, border reflect-101 (OpenCV's default).

On the GPU a separable filter of radius <= :data:`MAX_FUSED_RADIUS` is one fused kernel per frame: each block
reads its output tile plus a ``radius`` halo on every side from global memory (reflect-101 at the borders),
runs the vertical pass in registers into shared memory (the tile's rows, its columns plus the horizontal
halo), then the horizontal pass from shared memory, and writes the output once; unsharp's mix is folded into
that write. Nothing goes through a scratch frame, so the frame is read once and written once from DRAM (the
halo's re-reads hit the caches). Larger radii fall back to two one-thread-per-pixel passes through a scratch
frame. The taps (and the tile) are baked into the kernel source; kernel names record the radius, a digest of
the taps and the tile.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from dataclasses import dataclass

import numpy as np

from ..gpu.cuda import f32, float_literal, i32, launch_1d, launch_2d, raw_kernel
from ..gpu.kernels import load, source
from .registry import Filter, Param, register_filter

_SEP_SRC = r"""
// One pass of a separable filter over every plane (blockIdx.z); DX, DY select the direction.
extern "C" __global__ void @NAME@(const float* __restrict__ src, float* __restrict__ dst, int w, int h)
{
    const float taps[2 * @RADIUS@ + 1] = { @TAPS@ };
    PIPELINE_XY(w, h)
    const float* plane = src + (size_t)blockIdx.z * w * h;
    float acc = 0.f;
    #pragma unroll
    for (int k = -@RADIUS@; k <= @RADIUS@; ++k) {
        int xx = @DX@ ? reflect101(x + k, w) : x;
        int yy = @DY@ ? reflect101(y + k, h) : y;
        acc += taps[k + @RADIUS@] * plane[(size_t)yy * w + xx];
    }
    dst[(size_t)blockIdx.z * w * h + (size_t)y * w + x] = acc;
}
"""

# The fused kernel. Block (32, BY) threads, one TW x TH output tile of plane blockIdx.z.
#   Phase 1: vs[r][c] = vertical pass at tile row r, source column x0 - R + c (reflected), for the
#     SW = TW + 2R columns the horizontal pass needs. A work unit is one column and PY consecutive rows:
#     PY + 2R coalesced loads (consecutive threads, consecutive columns), PY accumulators in registers.
#   Phase 2: out(x0 + lx, y0 + ly) = sum_k taps[k] vs[ly][lx + k]; a thread makes outputs lx and lx + 1
#     from R + 1 float2 loads instead of 2 (2R + 1) scalar ones (a warp reads 64 consecutive floats of one
#     shared row: no bank conflicts); the write (and with MIX, unsharp's read of src at the pixel) is
#     coalesced, float2 wide when w is even and the frames 8-byte aligned.
# The vertical pass runs first so that it reads global memory straight into registers (no input tile in
# shared memory); the result equals horizontal-then-vertical up to float rounding.
# Row indices must not branch between the loads of a unit (a branch per load would keep the compiler from
# issuing them together, one memory latency each): blocks whose rows need no reflection take them as they
# are (ROWS_DIRECT), the rest reflect once without branches (ROWS_ONCE, any image taller than R); only
# images of at most R rows take the general loop. The column is reflected once per unit, before its loads.
_FUSED_SRC = r"""
#define R @RADIUS@
#define TW @TILE_W@
#define TH @TILE_H@
#define BY @BLOCK_Y@
#define PY @ROWS@
#define MIX @MIX@

constexpr int NT = 32 * BY;      // threads per block
constexpr int SW = TW + 2 * R;   // columns of the vertical pass: the tile and the horizontal halo
constexpr int NG = TH / PY;      // row groups of the vertical pass
enum { ROWS_DIRECT, ROWS_ONCE, ROWS_LOOP };

// unsharp: clamp(src + amount * (src - blur), 0, 1), rounded step by step as the CPU reference.
__device__ __forceinline__ float mix(float s, float blur, float amount) {
    return fminf(fmaxf(__fadd_rn(s, __fmul_rn(amount, __fsub_rn(s, blur))), 0.f), 1.f);
}

template <int MODE> __device__ __forceinline__ int row_index(int i, int h) {
    if (MODE == ROWS_DIRECT) return i;
    if (MODE == ROWS_ONCE) {  // h > R and i >= -R: one reflection; rows past h - 1 + R feed no written pixel
        i = abs(min(i, h - 1 + R));
        return i < h ? i : 2 * h - 2 - i;
    }
    return reflect101(i, h);
}

template <int MODE>
__device__ __forceinline__ void vertical_pass(const float* __restrict__ in, float (*vs)[SW], int x0, int y0,
                                              int w, int h)
{
    constexpr float taps[2 * R + 1] = { @TAPS@ };
    for (int u = threadIdx.y * 32 + threadIdx.x; u < SW * NG; u += NT) {
        const int c = u % SW, g = u / SW;
        const float* __restrict__ col = in + reflect101(x0 - R + c, w);
        const int r0 = y0 + g * PY - R;
        float acc[PY];
        #pragma unroll
        for (int j = 0; j < PY; ++j) acc[j] = 0.f;
        #pragma unroll
        for (int i = 0; i < PY + 2 * R; ++i) {
            const float v = __ldg(col + (size_t)row_index<MODE>(r0 + i, h) * w);
            #pragma unroll
            for (int j = 0; j < PY; ++j)
                if (i - j >= 0 && i - j <= 2 * R) acc[j] = fmaf(taps[i - j], v, acc[j]);
        }
        #pragma unroll
        for (int j = 0; j < PY; ++j) vs[g * PY + j][c] = acc[j];
    }
}

extern "C" __global__ void __launch_bounds__(NT, @MIN_BLOCKS@)
@NAME@(const float* __restrict__ src, float* __restrict__ dst, int w, int h, float amount)
{
    constexpr float taps[2 * R + 1] = { @TAPS@ };
    __shared__ __align__(16) float vs[TH][SW];

    const int x0 = blockIdx.x * TW, y0 = blockIdx.y * TH;
    const size_t plane = (size_t)blockIdx.z * w * h;
    if (y0 >= R && y0 + TH + R <= h) vertical_pass<ROWS_DIRECT>(src + plane, vs, x0, y0, w, h);
    else if (h > R) vertical_pass<ROWS_ONCE>(src + plane, vs, x0, y0, w, h);
    else vertical_pass<ROWS_LOOP>(src + plane, vs, x0, y0, w, h);
    __syncthreads();

    // Phase 2: each thread makes two neighbouring outputs per 64 columns: shared float2 loads, and float2
    // writes (and MIX reads) when they are 8-byte aligned: w even (every row starts aligned), frames aligned.
    const bool pairs = (w & 1) == 0 && ((reinterpret_cast<size_t>(src) | reinterpret_cast<size_t>(dst)) & 7) == 0;
    #pragma unroll
    for (int j = 0; j < TH / BY; ++j) {
        const int ly = threadIdx.y + j * BY, y = y0 + ly;
        float2 out[TW / 64];
        #pragma unroll
        for (int i = 0; i < TW / 64; ++i) {
            const float2* row = reinterpret_cast<const float2*>(&vs[ly][64 * i + 2 * threadIdx.x]);
            float2 q[R + 1];
            #pragma unroll
            for (int k = 0; k <= R; ++k) q[k] = row[k];
            float a = 0.f, b = 0.f;  // a = sum taps[m] v[m], b = sum taps[m] v[m + 1]
            #pragma unroll
            for (int m = 0; m <= 2 * R + 1; ++m) {
                const float v = m % 2 ? q[m / 2].y : q[m / 2].x;
                if (m <= 2 * R) a = fmaf(taps[m], v, a);
                if (m >= 1) b = fmaf(taps[m - 1], v, b);
            }
            out[i] = make_float2(a, b);
        }
        if (y < h) {
            #pragma unroll
            for (int i = 0; i < TW / 64; ++i) {
                const int x = x0 + 64 * i + 2 * threadIdx.x;
                const size_t o = plane + (size_t)y * w + x;
                float2 r = out[i];
                if (pairs) {
                    if (x < w) {
#if MIX
                        const float2 s = __ldg(reinterpret_cast<const float2*>(src + o));
                        r = make_float2(mix(s.x, r.x, amount), mix(s.y, r.y, amount));
#endif
                        *reinterpret_cast<float2*>(dst + o) = r;
                    }
                } else {
#if MIX
                    if (x < w) dst[o] = mix(__ldg(src + o), r.x, amount);
                    if (x + 1 < w) dst[o + 1] = mix(__ldg(src + o + 1), r.y, amount);
#else
                    if (x < w) dst[o] = r.x;
                    if (x + 1 < w) dst[o + 1] = r.y;
#endif
                }
            }
        }
    }
}
"""

_MIX_SRC = r"""
// In place on dst, which holds the blurred frame: dst = clamp(src + amount * (src - blur), 0, 1).
extern "C" __global__ void @NAME@(const float* __restrict__ src, float* dst, int n, float amount)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = src[i];
    float v = __fadd_rn(s, __fmul_rn(amount, __fsub_rn(s, dst[i])));
    dst[i] = fminf(fmaxf(v, 0.f), 1.f);
}
"""

MAX_FUSED_RADIUS = 32
SHARED_LIMIT = 48 * 1024  # static shared memory per block


@dataclass(frozen=True)
class FusedTile:
    """How the fused kernel cuts a frame: ``width`` x ``height`` outputs per block of 32 x ``block_y``
    threads; the vertical pass runs in units of one column by ``rows`` rows."""

    radius: int
    width: int  # a multiple of 64: a warp makes 64 outputs of a row
    height: int
    block_y: int = 8
    rows: int = 16
    min_blocks: int = 4  # __launch_bounds__' minimum resident blocks per SM: registers <= 65536 / (256 * this)

    @property
    def threads(self) -> int:
        return 32 * self.block_y

    @property
    def shared_bytes(self) -> int:
        return 4 * self.height * (self.width + 2 * self.radius)

    def grid(self, width: int, height: int, planes: int) -> tuple[int, int, int]:
        return (-(-width // self.width), -(-height // self.height), planes)

    def loads_per_output(self) -> float:
        """Global loads per output pixel (the halo re-read by neighbouring blocks included)."""
        rows = self.height // self.rows * (self.rows + 2 * self.radius)
        return (self.width + 2 * self.radius) * rows / (self.width * self.height)


def fused_tile(radius: int) -> FusedTile | None:
    """The fused kernel's tile for ``radius``, or None when the two-pass fallback should run."""
    if radius < 1:
        raise ValueError(f"radius must be >= 1, got {radius}")
    if radius > MAX_FUSED_RADIUS:
        return None
    # min_blocks: 5 resident blocks of 256 threads cap registers at 48, where ptxas still issues all of a
    # unit's loads together (checked with -Xptxas -v and the SASS, no spills up to radius 16); the
    # 128-wide tiles' shared memory (41-48 KiB) admits only 4 blocks per SM anyway, so they keep 64.
    if radius <= 4:
        width, height, min_blocks = 64, 32, 5
    elif radius <= 16:
        width, height, min_blocks = 64, 64, 5
    else:
        width, height, min_blocks = 128, 64, 4  # wider tiles keep the horizontal halo's share down
    tile = FusedTile(radius, width, height, rows=min(16, height), min_blocks=min_blocks)
    assert tile.shared_bytes <= SHARED_LIMIT and tile.width % 64 == 0
    assert tile.height % tile.rows == 0 and tile.height % tile.block_y == 0
    return tile


def _identifier(tag: str) -> str:
    """``tag`` made safe in a C identifier (a sigma of 1e-05 prints with a minus sign)."""
    return re.sub(r"\W", "_", tag)


def _digest(taps_bytes: bytes) -> str:
    # Kernels are cached by name: a digest of the taps keeps two sigmas that print alike apart.
    return hashlib.sha1(taps_bytes).hexdigest()[:8]


@functools.lru_cache(maxsize=64)
def _sep_source(taps_bytes: bytes, horizontal: bool, tag: str) -> tuple[str, str]:
    """(source, name) of one pass of the two-pass fallback; built once per taps, not per frame."""
    taps = np.frombuffer(taps_bytes, np.float32)
    radius = len(taps) // 2
    name = f"pipeline_{_identifier(tag)}_{'h' if horizontal else 'v'}_r{radius}_{_digest(taps_bytes)}"
    src = source(_SEP_SRC, name, RADIUS=radius, TAPS=", ".join(float_literal(t) for t in taps),
                 DX=int(horizontal), DY=int(not horizontal))
    return src, name


@functools.lru_cache(maxsize=64)
def _fused_source(taps_bytes: bytes, tag: str, mix: bool) -> tuple[str, str, FusedTile]:
    """(source, name, tile) of the fused kernel for these taps; ``mix`` folds unsharp's mix into the write."""
    taps = np.frombuffer(taps_bytes, np.float32)
    radius = len(taps) // 2
    tile = fused_tile(radius)
    if tile is None:
        raise ValueError(f"radius {radius} is above the fused kernel's {MAX_FUSED_RADIUS}")
    name = (
        f"pipeline_{_identifier(tag)}_fused_r{radius}_{_digest(taps_bytes)}_t{tile.width}x{tile.height}"
        f"{'_mix' if mix else ''}"
    )
    values = {
        "RADIUS": radius,
        "TILE_W": tile.width,
        "TILE_H": tile.height,
        "BLOCK_Y": tile.block_y,
        "ROWS": tile.rows,
        "MIX": int(mix),
        "MIN_BLOCKS": tile.min_blocks,
        "TAPS": ", ".join(float_literal(t) for t in taps),
    }
    return source(_FUSED_SRC, name, **values), name, tile


def gaussian_taps(sigma: float) -> np.ndarray:
    """OpenCV's getGaussianKernel for sigma > 0 (in double, normalised, then float32), without importing
    OpenCV on the GPU path: its import is a noticeable part of a run's start-up."""
    radius = max(1, math.ceil(3 * sigma))
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        taps = np.exp(np.float64(-0.5) / (sigma * sigma) * x * x)
    taps[radius] = 1.0  # exp(-inf * 0) for a sigma whose square underflows: the limit, one tap, as OpenCV's
    return (taps * (1.0 / taps.sum())).astype(np.float32)


def separable_cpu(src: np.ndarray, dst: np.ndarray, taps: np.ndarray) -> None:
    import cv2  # the CPU backend's convolution; not needed to run on the GPU

    for c in range(src.shape[0]):
        cv2.sepFilter2D(src[c], cv2.CV_32F, taps, taps, dst=dst[c], borderType=cv2.BORDER_REFLECT_101)


class Separable:
    """A separable filter bound to its taps once, so a frame costs one launch (two passes and, for unsharp,
    a mix above :data:`MAX_FUSED_RADIUS`) and no string building.

    ``amount``: unsharp's clamp(src + amount * (src - filtered), 0, 1) instead of the filtered frame.
    ``tmp`` (a frame like src) is used only by the two-pass fallback. dst must not overlap src (blocks read
    src's halo around tiles that others write)."""

    def __init__(self, taps: np.ndarray, tag: str, amount: float | None = None):
        taps_bytes = np.asarray(taps, np.float32).tobytes()
        self.amount = f32(amount or 0.0)
        self.mix = amount is not None
        self.tile = fused_tile(len(taps) // 2)
        if self.tile is not None:
            self._fused = raw_kernel(*_fused_source(taps_bytes, tag, self.mix)[:2])
        else:
            self._passes = [raw_kernel(*_sep_source(taps_bytes, horizontal, tag)) for horizontal in (True, False)]
            self._mix = raw_kernel(source(_MIX_SRC, "pipeline_unsharp_mix"), "pipeline_unsharp_mix") if self.mix else None

    @property
    def needs_scratch(self) -> bool:
        return self.tile is None

    def load(self) -> None:
        load(*([self._fused] if self.tile is not None else [*self._passes, *([self._mix] if self._mix else [])]))

    def __call__(self, src, dst, tmp=None) -> None:
        planes, h, w = src.shape
        if self.tile is not None:
            args = (src, dst, i32(w), i32(h), self.amount)
            self._fused(self.tile.grid(w, h, planes), (32, self.tile.block_y, 1), args)
            return
        horizontal, vertical = self._passes
        launch_2d(horizontal, w, h, (src, tmp, i32(w), i32(h)), planes=planes)
        launch_2d(vertical, w, h, (tmp, dst, i32(w), i32(h)), planes=planes)
        if self._mix is not None:
            launch_1d(self._mix, src.size, (src, dst, i32(src.size), self.amount))


def separable_cuda(src, dst, tmp, taps: np.ndarray, tag: str, amount: float | None = None) -> None:
    """One separable filtering of ``src`` into ``dst`` (binds the kernels each call: for tests and tools)."""
    Separable(taps, tag, amount)(src, dst, tmp)


def separable_scratch(taps: np.ndarray, width: int, height: int) -> list[tuple[int, ...]]:
    """The intermediate frame the two-pass fallback needs, above :data:`MAX_FUSED_RADIUS` only."""
    return [] if fused_tile(len(taps) // 2) is not None else [(3, height, width)]


class SeparableFilter(Filter):
    """Base of gblur, boxblur and unsharp: ``taps`` set in ``__init__``, kernels bound on first use."""

    taps: np.ndarray
    amount: float | None = None

    def kernel_tag(self) -> str:
        raise NotImplementedError

    def scratch_shapes(self, width, height):
        return separable_scratch(self.taps, width, height)

    def prepare(self):
        self._separable.load()

    @functools.cached_property
    def _separable(self) -> Separable:
        return Separable(self.taps, self.kernel_tag(), self.amount)

    def cuda(self, src, dst, scratch):
        self._separable(src, dst, scratch[0] if scratch else None)


@register_filter("gblur")
class GBlur(SeparableFilter):
    help = "Gaussian blur (separable, radius ceil(3 sigma), borders reflected)."
    params = (Param("sigma", float, 1.0, low=0.0, high=64.0, low_exclusive=True, help="standard deviation in pixels"),)

    def __init__(self, **values):
        super().__init__(**values)
        self.taps = gaussian_taps(self.sigma)

    def kernel_tag(self) -> str:
        return f"gblur_s{self.sigma:g}".replace(".", "p")

    def cpu(self, src, dst, scratch):
        separable_cpu(src, dst, self.taps)
