"""What the sink asks of the muxer and the encoder besides the user's options, and the checks that what the
user asked for was taken: an option FFmpeg would leave unused, a ``-params`` string the encoder could not
parse are refused before any frame is written."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

from .avlib import unused_muxer_options
from .encoders import video_encoder
from .errors import ConfigError
from .hdr import HdrMetadata, merge_params
from .log import log

MOV_SUFFIXES = {".mp4", ".m4v", ".mov", ".3gp", ".3g2"}


def muxer_options(target: Path, time_base: Fraction | None, given: dict[str, str]) -> dict[str, str]:
    """The muxer's options: ``given`` (the user's), with what MP4 and MOV need besides."""
    if target.suffix.lower() not in MOV_SUFFIXES:
        return given
    options = {}
    # MP4/MOV write the edit list (where presentation starts) in the movie timescale, 1/1000 by
    # default: a first timestamp of 6000/90000 s would come back as 5940. The video's own clock keeps it.
    if time_base and time_base.denominator < 2**31:
        options["movie_timescale"] = str(time_base.denominator)
    # The colour box is written only where primaries, transfer and matrix are all tagged: a stream tagged
    # with its matrix alone (most SD video) lost it, and read back as another. write_colr writes it always.
    flags = given.get("movflags", "")
    options["movflags"] = flags if "write_colr" in flags else f"{flags}+write_colr"
    return {**options, **{k: v for k, v in given.items() if k != "movflags"}}


# Frames the audio may be muxed ahead of the video: the run's own (a ring of up to 256 slots, 64 in flight) and
# the encoder's (x264's lookahead of up to 250 frames, 16 B-frames, a frame thread or more per core).
FRAMES_AHEAD = 640


def interleaving(given: dict[str, str], rate, audio: bool) -> dict[str, str]:
    """The audio is muxed as the input is read, ahead of the video by the frames in flight and those the
    encoder holds: at a slow rate (one frame in 10 s) that is past FFmpeg's 10 s interleaving limit, and
    FLV, which takes packets in time order only, failed at the end. The limit is then widened to cover them
    (the muxer holds the audio meanwhile; a live output's encoder holds no frames, and keeps FFmpeg's limit);
    a ``max_interleave_delta`` the user gave stands."""
    if not audio or not rate or "max_interleave_delta" in given:
        return given
    ahead_us = int(FRAMES_AHEAD / float(rate) * 1e6)
    return given if ahead_us <= 10_000_000 else {**given, "max_interleave_delta": str(ahead_us)}


def with_hdr(codec: str, options: dict[str, str], hdr: HdrMetadata | None, target) -> dict[str, str]:
    """``options`` with the input's HDR metadata in the encoder's params (the user's own keys win); for an
    encoder that cannot carry it, a notice."""
    if not hdr:
        return options
    params = hdr.encoder_params(video_encoder(codec).name)
    if params is None:
        log.info(f"{target}: the {codec} encoder cannot carry the input's HDR metadata ({hdr.describe()}); "
                 "it is not written (libx265, libx264 and libsvtav1 can)")
        return options
    option, values = params
    return {**options, option: merge_params(options.get(option), values)}


def check_muxer_options(target, muxer: str, options: dict[str, str]) -> None:
    """An --output-opt the muxer would not use is refused (FFmpeg would only leave it unused: a typo
    such as movflag=faststart ran with exit 0). Protocol options never reach the protocol here."""
    unused = unused_muxer_options(muxer, options) if options else []
    if unused:
        listed = ", ".join(f"{k}={options[k]}" for k in unused)
        raise ConfigError(f"{target}: the {muxer} muxer does not use {listed} (misspelled? `ffmpeg -h muxer={muxer}` "
                          "lists its options; protocol options go in the URL, e.g. udp://host:port?pkt_size=1316)")


def check_encoder_options(target, codec_context, options: dict[str, str]) -> None:
    """An --encoder-opt the encoder did not consume is refused: after opening, PyAV leaves exactly those
    in ``codec_context.options`` (a typo such as cfr=18 ran with exit 0 at the encoder's defaults)."""
    unused = [k for k in options if k in codec_context.options]
    if unused:
        name = codec_context.name
        listed = ", ".join(f"{k}={options[k]}" for k in unused)
        raise ConfigError(f"{target}: the {name} encoder does not use {listed} (misspelled? "
                          f"`ffmpeg -h encoder={name}` lists its options)")


# What libx264, libx265 and libsvtav1 log (a warning, and the encoder opens all the same) for a key or value
# of their -params string they cannot parse.
_PARAMS_REFUSED = re.compile(r"^(Error parsing option|Unknown option|Invalid value for)\b")


def check_params_parsed(target, name: str, options: dict[str, str], said) -> None:
    """A key or value of ``x264-params`` (``x265-params``, ``svtav1-params``) the encoder could not parse is
    refused, as an unused --encoder-opt is: FFmpeg only warns and runs at the encoder's defaults."""
    refused = [m.rstrip(".") for who, level, m in said.peek() if who == name and _PARAMS_REFUSED.match(m)]
    if refused:
        given = ", ".join(f"{k}={v}" for k, v in options.items() if k.endswith("-params"))
        raise ConfigError(f"{target}: the {name} encoder cannot parse {given}: {'; '.join(refused)}")
