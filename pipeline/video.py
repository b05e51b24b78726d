"""What flows between the stages: the video format, the stream's facts, and one in-flight frame."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from .errors import InputError

if TYPE_CHECKING:
    from .hdr import HdrMetadata

# Larger than any codec level allows (H.264 and HEVC stop at 8192 wide); bigger is a damaged header
# or an input no stage was sized for. Memory for big but legal frames is checked by the engine.
MAX_SIDE = 16384


def check_frame_size(path: str, width: int, height: int) -> None:
    """A frame size every stage takes: from a decoder's header or from the caller's own arrays."""
    if width < 2 or height < 2:
        raise InputError(f"{path}: frame size {width}x{height} is too small")
    if width > MAX_SIDE or height > MAX_SIDE:
        raise InputError(f"{path}: frame size {width}x{height} is too large; "
                         f"supported sizes are up to {MAX_SIDE}x{MAX_SIDE}")

# AVColorSpace values (FFmpeg's pixfmt.h). BT.709 and BT.2020 (non-constant luminance; constant luminance is
# read as it) have their own matrix; everything else is decoded as BT.601, which is also what swscale assumes
# for "unspecified" (untagged HD excepted, see Colour.from_tags).
AVCOL_SPC_RGB = 0
AVCOL_SPC_BT709 = 1
AVCOL_SPC_UNSPECIFIED = 2
AVCOL_SPC_BT470BG = 5
AVCOL_SPC_SMPTE170M = 6
AVCOL_SPC_SMPTE240M = 7
AVCOL_SPC_BT2020_NCL = 9
AVCOL_SPC_BT2020_CL = 10
AVCOL_RANGE_MPEG = 1
AVCOL_RANGE_JPEG = 2

# Luma weights (Kr, Kg, Kb) of each colour matrix: the one table the conversions, the filters that use
# luma and the CUDA prelude (pipeline/gpu/kernels.py) all read. Kg = 1 - Kr - Kb.
LUMA = {
    "bt601": (0.299, 0.587, 0.114),
    "bt709": (0.2126, 0.7152, 0.0722),
    "bt2020": (0.2627, 0.6780, 0.0593),
}


def approximated_matrix(colorspace: int, primaries: int = 2) -> str | None:
    """What to say of a matrix tag the conversions do not have, read as another one; None for the ones they
    have (and for untagged, reserved, and chroma-derived non-constant luminance on BT.709 or BT.2020
    primaries, whose weights are those matrices')."""
    if colorspace in _EXACT or (colorspace == AVCOL_SPC_CHROMA_DERIVED_NCL and primaries in _MATRIX_OF_PRIMARIES):
        return None
    if colorspace in _NEAR:
        return f"the {_NEAR[colorspace]} matrix is processed as the nearest the conversions have"
    name = _OTHER.get(colorspace, f"matrix tag {colorspace}")
    return f"{name} cannot be converted here: processed as BT.601, its colours are off"


AVCOL_SPC_RESERVED = 3
AVCOL_SPC_CHROMA_DERIVED_NCL = 12
_EXACT = frozenset({AVCOL_SPC_RGB, AVCOL_SPC_BT709, AVCOL_SPC_UNSPECIFIED, AVCOL_SPC_RESERVED, AVCOL_SPC_BT470BG,
                    AVCOL_SPC_SMPTE170M, AVCOL_SPC_BT2020_NCL, AVCOL_SPC_BT2020_CL})
_NEAR = {4: "FCC", AVCOL_SPC_SMPTE240M: "SMPTE 240M"}  # BT.601's weights to 0.01, BT.709's to 0.005
_OTHER = {8: "YCgCo", 11: "SMPTE 2085 (Y'D'zD'x)", 12: "chroma-derived non-constant luminance on these primaries",
          13: "chroma-derived constant luminance", 14: "ICtCp"}
# Chroma-derived non-constant luminance: the weights its primaries make, which are BT.709's and BT.2020's own
# on theirs (BT.601's weights come from other primaries than the 625- and 525-line ones it is used with).
_MATRIX_OF_PRIMARIES = {1: "bt709", 9: "bt2020"}


def is_hd(width: int, height: int) -> bool:
    """HD by its size, as players judge an untagged stream: wider than SD's 1024 (a 1280x536 crop of a film
    is HD) or taller than its 576 lines."""
    return width >= 1280 or height > 576


@dataclass(frozen=True)
class Colour:
    """Colour matrix and range of a YUV stream, as tagged in the input and kept for the output."""

    matrix: str = "bt601"
    full_range: bool = False
    # The raw tags, copied to the output so players treat it exactly as the input.
    colorspace: int = 2
    color_range: int = 0
    color_primaries: int = 2
    color_trc: int = 2

    @classmethod
    def from_tags(cls, colorspace: int, color_range: int, primaries: int = 2, trc: int = 2, height: int = 0,
                  width: int = 0):
        """The matrix a YUV stream's tags declare. BT.2020 constant luminance (10) is read as non-constant
        luminance (the source says so): its luma is computed from linear light, which no stage here does."""
        if colorspace in (AVCOL_SPC_BT709, AVCOL_SPC_SMPTE240M):  # 240M's weights are BT.709's to 0.005
            matrix = "bt709"
        elif colorspace in (AVCOL_SPC_BT2020_NCL, AVCOL_SPC_BT2020_CL):
            matrix = "bt2020"
        elif colorspace == AVCOL_SPC_CHROMA_DERIVED_NCL and primaries in _MATRIX_OF_PRIMARIES:
            matrix = _MATRIX_OF_PRIMARIES[primaries]
        elif colorspace in (AVCOL_SPC_UNSPECIFIED, AVCOL_SPC_RGB, AVCOL_SPC_RESERVED) and is_hd(width, height):
            matrix = "bt709"  # untagged HD video is BT.709 by convention
        else:
            matrix = "bt601"
        return cls(matrix, color_range == AVCOL_RANGE_JPEG, colorspace, color_range, primaries, trc)

    @classmethod
    def for_rgb(cls, height: int, primaries: int = 2, trc: int = 2, width: int = 0) -> Colour:
        """What an RGB (or grey) input is written with: YUV, BT.709 for HD and BT.601 for SD, limited range,
        tagged so (the input's primaries and transfer kept)."""
        if is_hd(width, height):
            return cls("bt709", False, AVCOL_SPC_BT709, AVCOL_RANGE_MPEG, primaries, trc)
        return cls("bt601", False, AVCOL_SPC_SMPTE170M, AVCOL_RANGE_MPEG, primaries, trc)

    @property
    def frame_colorspace(self) -> int:
        """The matrix tag the output's frames carry: the input's where it names one, else the matrix the run
        worked in (untagged HD: BT.709), so that a conversion to the encoder's format (RGB, grey) uses that
        matrix, not swscale's default of BT.601."""
        if self.colorspace not in (AVCOL_SPC_UNSPECIFIED, AVCOL_SPC_RGB, AVCOL_SPC_RESERVED):
            return self.colorspace  # the input's own, also where an encoder codes it per frame (ProRes)
        return {"bt709": AVCOL_SPC_BT709, "bt2020": AVCOL_SPC_BT2020_NCL}.get(self.matrix, AVCOL_SPC_SMPTE170M)

    @property
    def name(self) -> str:
        """BT.709, BT.601 or BT.2020, and the range: for notices."""
        return f"BT.{self.matrix[2:]} {'full' if self.full_range else 'limited'} range"

    @property
    def coefficients(self) -> tuple[float, float]:
        """(Kr, Kb) of this stream's matrix."""
        kr, _, kb = LUMA[self.matrix]
        return kr, kb


@dataclass(frozen=True)
class VideoFormat:
    """A 4:2:0 frame: its size, colour and bit depth (8, or 10 for deeper input: samples 0..1023 in uint16).

    I420 is the Y plane, then U, then V, tightly packed, one sample each (a byte at 8 bits)."""

    width: int
    height: int
    colour: Colour = Colour()
    depth: int = 8

    def __post_init__(self) -> None:
        if self.width % 2 or self.height % 2 or self.width <= 0 or self.height <= 0:
            raise ValueError(f"Invalid frame size {self.width}x{self.height}: 4:2:0 needs even, positive sizes")
        if self.depth not in (8, 10):
            raise ValueError(f"Invalid bit depth ({self.depth}). Supported values are 8, 10.")

    @property
    def nbytes(self) -> int:
        """Samples of the I420 frame: its bytes at 8 bits."""
        return self.width * self.height * 3 // 2

    @property
    def shape(self) -> tuple[int, int]:
        """Shape of the I420 samples as a 2-D array, the layout PyAV's ``from_numpy_buffer`` (8-bit) and
        ``from_ndarray`` (10-bit, uint16) take."""
        return (self.height * 3 // 2, self.width)

    def planes(self, buf):
        """Y, U, V views of a flat I420 buffer of samples (NumPy or CuPy, uint8 or uint16)."""
        w, h = self.width, self.height
        y_end = w * h
        c_size = y_end // 4
        y = buf[:y_end].reshape(h, w)
        u = buf[y_end : y_end + c_size].reshape(h // 2, w // 2)
        v = buf[y_end + c_size : y_end + 2 * c_size].reshape(h // 2, w // 2)
        return y, u, v

    def resized(self, width: int, height: int) -> VideoFormat:
        return VideoFormat(width, height, self.colour, self.depth)

    def with_depth(self, depth: int) -> VideoFormat:
        return dataclasses.replace(self, depth=depth)


MAX_SAR_TERM = 65535  # what codecs code a pixel aspect ratio in (H.264's VUI: 16 bits each)


def pixel_aspect(value: Any) -> Fraction | None:
    """A sample (pixel) aspect ratio as a codec can code it, or None: unknown (0/1, FFmpeg's "unset"), not a
    positive ratio, or one no picture has (beyond 1:256 either way, a damaged header)."""
    try:
        sar = Fraction(value.numerator, value.denominator)
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        return None
    if not Fraction(1, 256) <= sar <= 256:
        return None
    sar = sar.limit_denominator(MAX_SAR_TERM)
    return sar if sar.numerator <= MAX_SAR_TERM else 1 / (1 / sar).limit_denominator(MAX_SAR_TERM)


@dataclass(frozen=True)
class StreamInfo:
    """What a sink needs to know of the video it writes, without any codec object.

    ``format`` is the frame layout the sink receives (after the filter chain); the rest describes the
    stream's clock and presentation, copied from the input."""

    format: VideoFormat
    frame_rate: Fraction | None = None
    time_base: Fraction | None = None
    expected_frames: int | None = None
    display_matrix: tuple[int, ...] | None = None
    live: bool = False
    name: str = ""
    hdr: HdrMetadata | None = None  # mastering display and content light level, written where the encoder can
    sar: Fraction | None = None  # pixel aspect ratio (anamorphic video: not 1:1); None: unknown, written as such
    tags: tuple[tuple[str, str], ...] = ()  # the file's metadata (pipeline.tags), kept on the output
    video_tags: tuple[tuple[str, str], ...] = ()  # the video stream's (language, title...)

    def processed(self, fmt: VideoFormat, sar: Fraction | None) -> StreamInfo:
        """The stream the filter chain makes of this one: its frames' format and pixel aspect ratio."""
        return dataclasses.replace(self, format=fmt, sar=sar)


@dataclass
class FrameMeta:
    """Per-frame facts carried from decoder to encoder."""

    index: int
    pts: int | None
    time_base: Fraction | None
    decoded_at: float = field(default_factory=time.perf_counter)
    decode_s: float = 0.0
    duration: int | None = None  # ticks of time_base the frame lasts, where the input says
    # Host times (perf_counter) of the later hops, filled in by the engine for the latency report.
    stamps: dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float | None:
        """The frame's timestamp in seconds (None without a timestamp)."""
        if self.pts is None or not self.time_base:
            return None
        return float(self.pts * Fraction(self.time_base))


@dataclass(eq=False)
class WorkItem:
    """One in-flight frame: its metadata, host slots, device buffers, stream and events.

    The backend fills ``ctx`` (stream and events, reused from a small pool) and ``device``
    (buffers from the device memory strategy); the engine only moves items between stages.
    """

    meta: FrameMeta
    in_slot: Any = None
    out_slot: Any = None
    ctx: Any = None
    device: Any = None
    out_format: VideoFormat | None = None
    surface: Any = None  # a frame decoded into device memory (NVDEC): read in place, no upload
    surface_planes: Any = None  # the backend's views of it, held (with it) until the frame is done
    surface_home: Any = None  # where the surface goes back when done (a FrameReturns), None: dropped here
    copying: Any = None  # a Future while another thread copies the frame into in_slot

    def give_back_surface(self) -> None:
        """Let go of the decoded surface once the frame's work has completed: the views first (the frame
        still holds the buffer, so nothing is freed here), then the frame, to the thread that decodes."""
        self.surface_planes = None
        home, self.surface_home = self.surface_home, None
        if home is not None and self.surface is not None:
            home.take(self)
        self.surface = None
