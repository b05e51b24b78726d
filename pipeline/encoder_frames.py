"""The frames an encoder is given, made from the run's I420 output: the stream's colour tags, and the
conversion a frame needs where the encoder's format or codec is not the run's.

The run's frames are YUV in the input's matrix and range. swscale converts them where the encoder takes
another format, but left to the encoder's own conversion it reads the frame's tags alone: it weighs a tagged
frame's RGB with BT.601's luma to make grey, keeps float grey at limited range, and tags converted RGB with
the YUV frame's range (PNG's cICP then says "narrow" of full-range pixels). So each conversion is made here,
with the matrix and range the run worked in, and the result tagged with what it is.
"""

from __future__ import annotations

import av
from av.video.reformatter import ColorRange, Colorspace, Interpolation, VideoReformatter

from .encoders import CODED_MATRICES, makes_limited_range
from .muxers import codec_name, loses_colour_tags, loses_range
from .video import (AVCOL_RANGE_JPEG, AVCOL_RANGE_MPEG, AVCOL_SPC_BT470BG, AVCOL_SPC_BT709, AVCOL_SPC_BT2020_NCL,
                    AVCOL_SPC_RGB, AVCOL_SPC_UNSPECIFIED, Colour, is_hd)

# The run's matrices as swscale names them.
SWSCALE_MATRIX = {"bt601": Colorspace.ITU601, "bt709": Colorspace.ITU709, "bt2020": Colorspace.BT2020}
# The tag of each, as the encoders that code a matrix read it (JPEG's BT.601 as FFmpeg's decoder says it).
MATRIX_TAG = {"bt601": AVCOL_SPC_BT470BG, "bt709": AVCOL_SPC_BT709, "bt2020": AVCOL_SPC_BT2020_NCL}
# Exact rounding for YUV to YUV (without it BT.601's neutral chroma came out 127); RGB keeps swscale's default.
ACCURATE = Interpolation.BILINEAR | Interpolation.ACCURATE_RND


def is_yuv(pix_fmt: str) -> bool:
    """Planar, semi-planar or packed (uyvy422): three components or more, neither RGB nor a palette."""
    fmt = av.VideoFormat(pix_fmt)
    return not fmt.is_rgb and not fmt.has_palette and len(fmt.components) >= 3


def is_grey(pix_fmt: str) -> bool:
    """Grey, with or without alpha (ya8), or one bit (monow)."""
    fmt = av.VideoFormat(pix_fmt)
    return not fmt.is_rgb and not fmt.has_palette and len(fmt.components) <= 2


class EncoderFrames:
    """What the encoder's frames are made into: decided once, as the stream is added (:meth:`tag_stream`),
    then applied to each frame (:meth:`convert`)."""

    def __init__(self, pix_fmt: str, colour: Colour, target):
        self.pix_fmt, self.colour, self.target = pix_fmt, colour, target
        self.kind = "rgb" if av.VideoFormat(pix_fmt).is_rgb else "grey" if is_grey(pix_fmt) else None
        self._src_range = ColorRange.JPEG if colour.full_range else ColorRange.MPEG
        self.matrix = colour.matrix  # the frames', once converted
        self._dst_range = self._src_range  # the stream's, once tagged
        self.notices: list[str] = []  # said once the encoder has opened: a refusal is the run's one line
        # One swscale context each for the run, not one a frame (as the encoder keeps its own)
        self._sws, self._sws_float = VideoReformatter(), VideoReformatter()

    def tag_stream(self, cc, muxer: str) -> None:
        """The stream's tags, and for YUV whether the frames must change range (an encoder that codes
        limited range only) or matrix (JPEG's), each said with a notice."""
        colour = self.colour
        if is_yuv(self.pix_fmt):  # the tags describe YUV, not RGB or a palette
            cc.colorspace, cc.color_range = colour.colorspace, colour.color_range
            if self.pix_fmt.startswith("yuvj"):
                cc.color_range = AVCOL_RANGE_JPEG
            elif colour.full_range and (why := _limited_only(cc, muxer)):
                cc.color_range, self.kind = AVCOL_RANGE_MPEG, "limited"
                self.notices.append(f"{self.target}: {why}: the full-range frames are converted to limited range")
            coded = CODED_MATRICES.get(cc.name, (colour.matrix,))
            if colour.matrix not in coded:  # HD to BT.709 where the codec has both
                self.matrix = coded[0] if len(coded) == 1 else "bt709" if is_hd(cc.width, cc.height) else "bt601"
                cc.colorspace, self.kind = MATRIX_TAG[self.matrix], "matrix"
                self.notices.append(f"{self.target}: {cc.name} codes {' or '.join(_named(m) for m in coded)} only: "
                                    f"the {_named(colour.matrix)} frames are converted to {_named(self.matrix)}")
        elif self.kind == "grey":  # made full range (below), as swscale makes integer grey anyway
            cc.color_range = AVCOL_RANGE_JPEG
        elif self.kind == "rgb":  # RGB, so tagged: MOV writes primaries and transfer only beside a matrix tag
            cc.colorspace, cc.color_range = AVCOL_SPC_RGB, AVCOL_RANGE_JPEG
        cc.color_primaries, cc.color_trc = colour.color_primaries, colour.color_trc
        self._dst_range = ColorRange(cc.color_range)
        if is_yuv(self.pix_fmt):
            self.notices += _untagged_notice(self.target, muxer, cc,
                                             Colour(self.matrix, cc.color_range == AVCOL_RANGE_JPEG))

    def convert(self, frame: av.VideoFrame) -> av.VideoFrame:
        """``frame`` (the run's YUV, tagged as the input) as the encoder takes it."""
        if self.kind == "limited":
            return self._sws.reformat(frame, format=self.pix_fmt, dst_color_range=ColorRange.MPEG)
        if self.kind == "matrix":
            frame = self._sws.reformat(frame, format=self.pix_fmt, src_colorspace=SWSCALE_MATRIX[self.colour.matrix],
                                       dst_colorspace=SWSCALE_MATRIX[self.matrix], src_color_range=self._src_range,
                                       dst_color_range=self._dst_range, interpolation=ACCURATE)
            frame.colorspace, frame.color_range = MATRIX_TAG[self.matrix], self._dst_range
        elif self.kind == "rgb":
            frame = self._sws.reformat(frame, format=self.pix_fmt, src_colorspace=SWSCALE_MATRIX[self.colour.matrix],
                                       src_color_range=self._src_range, dst_color_range=ColorRange.JPEG)
            frame.colorspace, frame.color_range = AVCOL_SPC_RGB, AVCOL_RANGE_JPEG
        elif self.kind == "grey":
            frame = self._grey(frame)
            frame.colorspace, frame.color_range = AVCOL_SPC_UNSPECIFIED, AVCOL_RANGE_JPEG
        return frame

    def _grey(self, frame: av.VideoFrame) -> av.VideoFrame:
        """The Y plane at full range. The same matrix on both sides keeps swscale from going through RGB; float
        grey it leaves at limited range, so it comes from 16-bit grey."""
        floats = "f32" in self.pix_fmt or "f16" in self.pix_fmt
        grey = self._sws.reformat(frame, format="gray16le" if floats else self.pix_fmt,
                                  src_colorspace=Colorspace.ITU601, dst_colorspace=Colorspace.ITU601,
                                  src_color_range=self._src_range, dst_color_range=ColorRange.JPEG)
        if floats:
            grey = self._sws_float.reformat(grey, format=self.pix_fmt, src_color_range=ColorRange.JPEG,
                                            dst_color_range=ColorRange.JPEG)
        return grey


def _limited_only(cc, muxer: str) -> str | None:
    """Why full-range frames must be made limited for this stream, or None: the encoder codes limited range
    only, or MOV keeps no range tag for it."""
    if makes_limited_range(cc.name, muxer):
        return f"{cc.name} codes limited range only"
    if loses_range(muxer, codec_name(cc.codec)):
        return f"{muxer} keeps no range tag for {cc.name} (.mkv or .mp4 keeps full range)"
    return None


def _named(matrix: str) -> str:
    return f"BT.{matrix[2:]}"


def _untagged_notice(target, muxer: str, cc, held: Colour) -> list[str]:
    """A notice where the output reads back as other colours than it holds (``held``): no tag to say them,
    and they are not what players assume of an untagged stream of its size."""
    assumed = Colour.from_tags(AVCOL_SPC_UNSPECIFIED, AVCOL_RANGE_MPEG, width=cc.width, height=cc.height)
    if (held.matrix, held.full_range) == (assumed.matrix, assumed.full_range) or \
            not loses_colour_tags(muxer, codec_name(cc.codec)):
        return []
    return [f"{target}: {muxer} keeps no colour tags and {cc.name} codes none: players will read these "
            f"{held.name} frames as {assumed.name} (.mkv or .mov keeps the tags)"]
