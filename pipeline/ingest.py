"""What a decoded frame is, for the pipeline: the layout it enters in, its colour, its HDR metadata, and
the copy of its planes into a host slot. Part of the source (with :mod:`pipeline.source`, it reads PyAV frames).

Layouts (see :mod:`pipeline.convert`): NVDEC's surfaces stay in device memory, ``nv12`` or ``p010``;
frames decoded on the CPU enter as ``i420`` (8-bit YUV), ``i420p10`` (YUV deeper than 8 bits: 10-bit kept,
9-bit widened, 12 and more bits rounded to 10) or ``rgb24`` (RGB, grey or palette frames: no chroma
subsampled on the way in). An RGB input deeper than 8 bits enters as ``i420p10``, converted by swscale with
the matrix the output is tagged with.

RGB input has no YUV matrix, but the filters' output is YUV 4:2:0: it is written with BT.709 (HD) or BT.601
(SD), limited range, and tagged so (a notice says which). Grey input is read in its own range (swscale reads
every grey as full range). A matrix tag the conversions do not have is read as the nearest one, with a notice.
"""

from __future__ import annotations

from typing import Callable

import av
import numpy as np
from av.sidedata.sidedata import SideDataContainer
from av.sidedata.sidedata import Type as SideData
from av.video.reformatter import ColorRange, Colorspace, VideoReformatter

from .convert.layouts import layout_depth
from .errors import DecoderRefused
from .hdr import HdrMetadata
from .video import AVCOL_RANGE_JPEG, AVCOL_SPC_BT2020_CL, Colour, VideoFormat, approximated_matrix

# What each host layout's frames are, as PyAV names the format; frames in another format are converted.
TARGET_FORMAT = {"i420": "yuv420p", "i420p10": "yuv420p10le", "rgb24": "rgb24"}
NATIVE = {"i420": ("yuv420p", "yuvj420p"), "i420p10": ("yuv420p10le",), "rgb24": ("rgb24",)}
SURFACE_LAYOUT = {"nv12": "nv12", "p010le": "p010"}  # NVDEC's sw_format -> device layout
MAX_SURFACE_DEPTH = 10  # bits: P010 is the deepest surface the conversion kernels read
SWS_MATRIX = {"bt709": Colorspace.ITU709, "bt601": Colorspace.ITU601, "bt2020": Colorspace.BT2020}


def depth_of(fmt: av.VideoFormat) -> int:
    return max((c.bits for c in fmt.components), default=8)


def is_rgb_like(fmt: av.VideoFormat) -> bool:
    """RGB, grey or palette frames: no YUV matrix of their own."""
    return bool(fmt.is_rgb or fmt.has_palette or len(fmt.components) <= 2)  # gray, gray + alpha


def host_layout(fmt: av.VideoFormat) -> str:
    """The layout a CPU-decoded frame of ``fmt`` enters in."""
    if is_rgb_like(fmt):
        return "i420p10" if depth_of(fmt) > 8 else "rgb24"
    return "i420p10" if depth_of(fmt) > 8 else "i420"


def surface_layout(path: str, frame: av.VideoFrame, describe: Callable[[], str]) -> str:
    """The device layout of an NVDEC frame. With software fallback off PyAV still decodes a codec without a
    CUDA path on the CPU, silently: only the frame's format tells."""
    sw = getattr(frame, "sw_format", None)
    if frame.format.name == "cuda" and sw is not None and depth_of(sw) > MAX_SURFACE_DEPTH:
        raise _deep_refused(path, sw)  # HEVC Main 12 decodes into 16-bit surfaces
    if frame.format.name != "cuda" or sw is None or sw.name not in SURFACE_LAYOUT:
        what = f"{frame.format.name}" + (f"/{sw.name}" if sw is not None else "")
        raise DecoderRefused(f"{path}: NVDEC cannot decode this stream ({describe()}, gave {what} "
                             "frames); use --decode cpu")
    return SURFACE_LAYOUT[sw.name]


def refuse_deep_surfaces(path: str, video) -> None:
    """NVDEC takes 8-bit (NV12 surfaces) and 10-bit (P010) input. Deeper streams (HEVC Main 12 would come as
    16-bit surfaces, which no kernel reads) are refused from the stream's header, before a packet is read,
    so ``--decode auto`` decodes them on the CPU (kept to 10 bits, as any deeper input). With the hardware
    decoder the stream analysis reads headers only and seldom says the depth: :func:`surface_layout`
    checks the first frame's surfaces."""
    fmt = header_format(video)
    if fmt is not None and not is_rgb_like(fmt) and depth_of(fmt) > MAX_SURFACE_DEPTH:
        raise _deep_refused(path, fmt)


def header_format(video) -> av.VideoFormat | None:
    """The stream's pixel format as its header gives it. Under the hardware decoder PyAV's ``format`` is the
    hardware one ("cuda", no components) while ``pix_fmt`` still names the stream's own."""
    cc = video.codec_context
    if cc is None:
        return None
    fmt = cc.format
    if fmt is not None and fmt.name != "cuda":
        return fmt
    name = cc.pix_fmt
    if not name or name == "cuda":
        return None
    try:
        return av.VideoFormat(name)
    except ValueError:
        return None


def _deep_refused(path: str, fmt: av.VideoFormat) -> DecoderRefused:
    return DecoderRefused(f"{path}: NVDEC is not used for {depth_of(fmt)}-bit input ({fmt.name}), "
                          f"{MAX_SURFACE_DEPTH} bits at most; use --decode cpu (10 bits are kept)")


def input_format(path: str, frame: av.VideoFrame, layout: str, notice: Callable[[str], None]) -> VideoFormat:
    """The format the pipeline works in: the frame's size (even), colour and depth."""
    w, h = frame.width, frame.height
    pix = _sw_format(frame)
    if layout == "rgb24" or is_rgb_like(pix):
        colour = Colour.for_rgb(h - h % 2, frame.color_primaries, frame.color_trc, w - w % 2)
        notice(f"{path}: {pix.name} input leaves the filters as YUV 4:2:0, converted with {colour.name} and tagged so")
    else:
        colour = yuv_colour(frame)
        if (approximated := approximated_matrix(frame.colorspace, frame.color_primaries)) is not None:
            notice(f"{path}: {approximated} ({colour.name.split(' ')[0]}); the output keeps the input's tags")
        if frame.colorspace == AVCOL_SPC_BT2020_CL:
            notice(f"{path}: BT.2020 constant luminance is processed as non-constant luminance (the same "
                   "weights, applied to R'G'B' rather than linear light); the output keeps the input's tags")
    depth = layout_depth(layout)
    if depth_of(pix) > 10 and depth == 10:
        notice(f"{path}: {pix.name} is kept to 10 bits")
    return VideoFormat(w - w % 2, h - h % 2, colour, depth)


def yuv_colour(frame: av.VideoFrame) -> Colour:
    """The matrix and range a YUV frame's tags declare (yuvj formats are full range untagged), untagged HD
    read as BT.709."""
    colour_range = frame.color_range
    if _sw_format(frame).name.startswith("yuvj") and colour_range == 0:
        colour_range = AVCOL_RANGE_JPEG
    return Colour.from_tags(frame.colorspace, colour_range, frame.color_primaries, frame.color_trc, frame.height,
                            frame.width)


def _sw_format(frame: av.VideoFrame) -> av.VideoFormat:
    sw = getattr(frame, "sw_format", None) if frame.format.name == "cuda" else None
    return sw if sw is not None else frame.format


def _side_data(frame: av.VideoFrame) -> SideDataContainer:
    """The frame's side data, not cached on the frame: ``frame.side_data`` caches a container that points
    back at the frame, a reference cycle that keeps the frame's buffers until a full garbage collection."""
    return SideDataContainer(frame)


def read_hdr(frame: av.VideoFrame) -> HdrMetadata | None:
    """The mastering display and content light level the frame carries (the first frame of an HDR stream,
    a keyframe, does)."""
    side = _side_data(frame)
    mastering, light = side.get(SideData.MASTERING_DISPLAY_METADATA), side.get(SideData.CONTENT_LIGHT_LEVEL)
    return HdrMetadata.parse(bytes(mastering) if mastering is not None else None,
                             bytes(light) if light is not None else None)


def display_matrix(frame: av.VideoFrame) -> tuple[int, ...] | None:
    """The rotation/flip matrix a player applies when showing the frame (FFmpeg's layout), if any."""
    data = _side_data(frame).get(SideData.DISPLAYMATRIX)
    if data is None:
        return None
    values = tuple(int(v) for v in np.frombuffer(bytes(data), np.int32))
    return values if len(values) == 9 else None


class OtherColour:
    """The colour of a YUV frame whose tags are not the run's (a splice of BT.601 and BT.709, or of limited and
    full range), read as the first frame's were; None where they agree, and for RGB frames (no matrix). Worked
    out when the tags change only: a frame's cost is reading them."""

    def __init__(self, run: Colour):
        self.run = (run.matrix, run.full_range)
        self._tags: tuple | None = None
        self._other: Colour | None = None

    def __call__(self, frame: av.VideoFrame) -> Colour | None:
        tags = (frame.colorspace, frame.color_range, frame.color_primaries, frame.width, frame.height,
                frame.format.name)
        if tags != self._tags:
            self._tags, self._other = tags, None
            if not is_rgb_like(_sw_format(frame)):
                colour = yuv_colour(frame)
                self._other = colour if (colour.matrix, colour.full_range) != self.run else None
        return self._other


class SlotWriter:
    """Copies decoded frames into host slots of one layout, converting (swscale) a format, size or colour the
    kernels do not take; the first conversion of each kind is noticed once."""

    def __init__(self, path: str, layout: str, fmt: VideoFormat, notice: Callable[[str], None]):
        self.path, self.layout, self.fmt, self.notice = path, layout, fmt, notice
        self._reformatter = VideoReformatter()  # keeps its swscale context across frames
        self._noticed = self._noticed_colour = False
        self._other_colour = OtherColour(fmt.colour) if layout != "rgb24" else lambda frame: None

    def __call__(self, frame: av.VideoFrame, dst: np.ndarray) -> None:
        fmt, layout = self.fmt, self.layout
        same_size = (frame.width & ~1, frame.height & ~1) == (fmt.width, fmt.height)
        other = self._other_colour(frame)
        if other is not None or frame.format.name not in NATIVE[layout] or not same_size:
            frame = self._convert(frame, same_size, other)
        if layout == "rgb24":
            rows, cols = fmt.height, fmt.width * 3
            plane = frame.planes[0]
            src = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)[:rows, :cols]
            np.copyto(dst.reshape(rows, cols), src)
            return
        dtype = np.uint16 if layout == "i420p10" else np.uint8
        samples = dst if dst.dtype == dtype else dst.view(dtype)
        for plane, target in zip(frame.planes, fmt.planes(samples)):
            rows, cols = target.shape
            # Decoders pad rows to line_size (bytes); copy only the visible part.
            src = np.frombuffer(plane, dtype).reshape(-1, plane.line_size // np.dtype(dtype).itemsize)
            np.copyto(target, src[:rows, :cols])

    def _convert(self, frame: av.VideoFrame, same_size: bool, other: Colour | None = None) -> av.VideoFrame:
        fmt, target = self.fmt, TARGET_FORMAT[self.layout]
        if other is not None and not self._noticed_colour:
            self.notice(f"{self.path}: frames in {other.name} after frames in {fmt.colour.name}: converted "
                        "to the first frames' colour, which the output is tagged with")
            self._noticed_colour = True
        if (frame.format.name not in NATIVE[self.layout] or not same_size) and not self._noticed:
            self.notice(f"{self.path}: converting {frame.format.name} {frame.width}x{frame.height} "
                        f"to {target} {fmt.width}x{fmt.height}")
            self._noticed = True
        # Same size: convert the format only and crop the odd row/column after, rather than resample the
        # whole picture by a pixel. Another size (a mid-stream change): scale.
        width, height = (frame.width, frame.height) if same_size else (fmt.width, fmt.height)
        # swscale reads grey as full range whatever its tag says: limited-range grey (a 4:0:0 H.264 or HEVC
        # stream's) is asked for in full range, so its codes pass unchanged (they are limited range already),
        # or expanded here on the way to RGB.
        limited_grey = _is_limited_grey(frame)
        colour = {}
        if target != "rgb24" and is_rgb_like(frame.format):  # RGB into YUV: the matrix the output is tagged with
            full = fmt.colour.full_range or limited_grey
            colour = _sws_colour("dst", fmt.colour.matrix, full)
        elif other is not None:  # YUV of another matrix or range into the run's
            colour = {**_sws_colour("src", other.matrix, other.full_range),
                      **_sws_colour("dst", fmt.colour.matrix, fmt.colour.full_range)}
        converted = self._reformatter.reformat(frame, width=width, height=height, format=target, **colour)
        if target == "rgb24" and limited_grey:
            samples = np.frombuffer(converted.planes[0], np.uint8)
            np.take(_EXPAND_LIMITED, samples, out=samples)  # in place: no array per frame
        return converted


def _sws_colour(end: str, matrix: str, full_range: bool) -> dict:
    """swscale's matrix and range arguments of one end (``src`` or ``dst``) of a conversion."""
    return {f"{end}_colorspace": SWS_MATRIX[matrix],
            f"{end}_color_range": ColorRange.JPEG if full_range else ColorRange.MPEG}


# Limited-range 8-bit codes (16..235) to full range (0..255), clipped as a decoder's conversion clips.
_EXPAND_LIMITED = np.clip(np.round((np.arange(256) - 16) * 255 / 219), 0, 255).astype(np.uint8)


def _is_limited_grey(frame: av.VideoFrame) -> bool:
    fmt = frame.format
    return not fmt.is_rgb and not fmt.has_palette and len(fmt.components) <= 2 and frame.color_range == 1
