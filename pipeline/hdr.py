"""HDR metadata: the mastering display and content light level of a stream, read from a decoded frame's
side data and written back through the encoder's own parameters.

FFmpeg hands both as raw C structs (``frame.side_data``; PyAV cannot attach them to frames it encodes):

- ``AVMasteringDisplayMetadata``: ``AVRational display_primaries[3][2]`` (R, G, B; x, y),
  ``AVRational white_point[2]``, ``AVRational min_luminance``, ``AVRational max_luminance`` (each a pair of
  int32, numerator then denominator), then ``int has_primaries``, ``int has_luminance``: 88 bytes;
- ``AVContentLightMetadata``: ``unsigned MaxCLL, MaxFALL`` (cd/m2): 8 bytes.

The encoders that carry them take them as parameters: x265's ``master-display`` and ``max-cll``, x264's
``mastering-display`` and ``cll`` (chromaticities in 0.00002 units, luminance in 0.0001 cd/m2, in the order
G, B, R, white point, L(max, min)), SVT-AV1's ``mastering-display`` and ``content-light`` (the same order, in
plain numbers). No module here imports ``av``: the source hands the bytes in.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from fractions import Fraction

_MASTERING = struct.Struct("<20i2i")
_LIGHT = struct.Struct("<2I")

# Encoder -> (its params option, how the metadata is spelled in it).
PARAMS_OPTION = {"libx265": "x265-params", "libx264": "x264-params", "libsvtav1": "svtav1-params"}

Point = tuple[Fraction, Fraction]


@dataclass(frozen=True)
class MasteringDisplay:
    """The display the content was graded on: primaries (R, G, B) and white point as CIE 1931 (x, y),
    luminance range in cd/m2."""

    red: Point
    green: Point
    blue: Point
    white: Point
    min_luminance: Fraction
    max_luminance: Fraction

    def integer_units(self) -> str:
        """x265/x264 spelling: ``G(x,y)B(x,y)R(x,y)WP(x,y)L(max,min)``, chromaticities x 50000, luminance x 10000."""
        def xy(p: Point) -> str:
            return f"({round(p[0] * 50000)},{round(p[1] * 50000)})"

        return (f"G{xy(self.green)}B{xy(self.blue)}R{xy(self.red)}WP{xy(self.white)}"
                f"L({round(self.max_luminance * 10000)},{round(self.min_luminance * 10000)})")

    def plain_units(self) -> str:
        """SVT-AV1 spelling: the same order, plain numbers."""
        def n(v: Fraction) -> str:
            return f"{float(v):.6g}"

        def xy(p: Point) -> str:
            return f"({n(p[0])},{n(p[1])})"

        return (f"G{xy(self.green)}B{xy(self.blue)}R{xy(self.red)}WP{xy(self.white)}"
                f"L({n(self.max_luminance)},{n(self.min_luminance)})")


@dataclass(frozen=True)
class HdrMetadata:
    mastering: MasteringDisplay | None = None
    max_cll: int | None = None  # maximum content light level, cd/m2
    max_fall: int | None = None  # maximum frame-average light level, cd/m2

    def __bool__(self) -> bool:
        return self.mastering is not None or self.max_cll is not None

    @classmethod
    def parse(cls, mastering: bytes | None, light: bytes | None) -> HdrMetadata | None:
        """From the side data's bytes (either may be None); None when neither says anything usable."""
        display = parse_mastering(mastering) if mastering is not None else None
        cll = fall = None
        if light is not None and len(light) >= _LIGHT.size:
            cll, fall = _LIGHT.unpack_from(light)
        metadata = cls(display, cll, fall)
        return metadata if metadata else None

    def describe(self) -> str:
        parts = []
        if self.mastering is not None:
            m = self.mastering
            parts.append(f"mastering display {float(m.min_luminance):g}-{float(m.max_luminance):g} cd/m2")
        if self.max_cll is not None:
            parts.append(f"MaxCLL {self.max_cll}, MaxFALL {self.max_fall}")
        return ", ".join(parts)

    def encoder_params(self, codec: str) -> tuple[str, dict[str, str]] | None:
        """(the encoder's params option, its keys and values for this metadata); None for an encoder that
        cannot carry it."""
        option = PARAMS_OPTION.get(codec)
        if option is None:
            return None
        values: dict[str, str] = {}
        light = f"{self.max_cll},{self.max_fall}" if self.max_cll is not None else None
        m = self.mastering
        if codec == "libx265":
            if m is not None:
                values["master-display"] = m.integer_units()
            if light:
                values["max-cll"] = light
        elif codec == "libx264":
            if m is not None:
                values["mastering-display"] = m.integer_units()
            if light:
                values["cll"] = light
        else:
            if m is not None:
                values["mastering-display"] = m.plain_units()
            if light:
                values["content-light"] = light
        return option, values


def parse_mastering(data: bytes) -> MasteringDisplay | None:
    """An ``AVMasteringDisplayMetadata``; None unless it has both primaries and luminance (the encoders'
    parameters take the whole description) or a denominator is 0."""
    if len(data) < _MASTERING.size:
        return None
    v = _MASTERING.unpack_from(data)
    has_primaries, has_luminance = v[20], v[21]
    if not (has_primaries and has_luminance) or any(d == 0 for d in v[1:20:2]):
        return None
    q = [Fraction(v[i], v[i + 1]) for i in range(0, 20, 2)]
    return MasteringDisplay((q[0], q[1]), (q[2], q[3]), (q[4], q[5]), (q[6], q[7]), q[8], q[9])


def merge_params(user: str | None, ours: dict[str, str]) -> str:
    """``key=value:key=value`` params: the user's own, then ours for the keys the user did not set."""
    items = [item for item in (user or "").split(":") if item]
    given = {item.partition("=")[0].strip() for item in items}
    items += [f"{k}={v}" for k, v in ours.items() if k not in given]
    return ":".join(items)
