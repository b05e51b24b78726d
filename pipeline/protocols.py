"""URL outputs and inputs: which muxer a stream URL gets, and whether PyAV's FFmpeg has its protocol.

PyAV has no API for the protocols its libavformat was built with; they are read through ctypes
(``avio_enum_protocols``) from the very library PyAV links, so a URL whose protocol is missing is refused
before anything is opened (exit 2), naming the ones there are.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Iterator

import av

from .config import is_url
from .errors import ConfigError

# The muxer a stream URL gets without --format: what players and servers expect on that protocol.
URL_MUXERS = {"udp": "mpegts", "tcp": "mpegts", "srt": "mpegts", "rtp": "rtp_mpegts", "rtmp": "flv",
              "rtmps": "flv", "rtsp": "rtsp", "http": "mpegts", "https": "mpegts"}


def url_muxer(url: str, output_format: str | None) -> str:
    if output_format:
        return output_format
    scheme = url.partition("://")[0].lower()
    if scheme not in URL_MUXERS:
        raise ConfigError(f"{url}: cannot choose a muxer for {scheme}:// outputs; give one with --format "
                          "(e.g. --format mpegts)")
    return URL_MUXERS[scheme]


# URL schemes handled by a (de)muxer that opens the network itself, not by an FFmpeg protocol.
URL_FORMATS = frozenset({"rtsp", "rtsps", "sap"})


def check_protocol(name: str, output: bool = False) -> None:
    """Refuse, before anything is opened, a URL whose protocol the FFmpeg PyAV runs on lacks (exit 2),
    naming the protocols it has. Where that list cannot be read, nothing is refused here."""
    if not is_url(name):
        return
    scheme = name.partition("://")[0].lower()
    available = ffmpeg_protocols(output)
    if available is None or scheme in available or scheme in URL_FORMATS:
        return
    side = "output" if output else "input"
    raise ConfigError(f"{name}: the installed FFmpeg (PyAV's) has no {scheme} protocol; its {side} protocols: "
                      f"{', '.join(available)}, and {', '.join(sorted(URL_FORMATS))} through their (de)muxers "
                      "(the README's 'Protocols' says how to get an FFmpeg with others)")


@functools.cache
def ffmpeg_protocols(output: bool = False) -> tuple[str, ...] | None:
    """The protocols of the libavformat PyAV is linked to, for input or output, in FFmpeg's order (PyAV
    has no API for them: ``avio_enum_protocols`` through ctypes); None where it cannot be found."""
    enum = _avio_enum_protocols()
    if enum is None:
        return None
    opaque, names = ctypes.c_void_p(None), []
    while (name := enum(ctypes.byref(opaque), int(output))) is not None:
        names.append(name.decode())
    return tuple(names)


def _avio_enum_protocols():
    for path in _avformat_candidates():
        try:
            function = ctypes.CDLL(path).avio_enum_protocols
        except (OSError, AttributeError):
            continue
        function.restype = ctypes.c_char_p
        function.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        return function
    return None


def _avformat_candidates() -> Iterator[str]:
    """PyAV's compiled format module first: a symbol looked up through it is found in the libraries it
    links, wherever they are (a wheel's or the system's). Then a wheel's bundled libraries (``av.libs``,
    ``*.libs`` or ``av/.dylibs``). Never a system library PyAV may not be using."""
    module = getattr(av.format, "__file__", None) or ""
    if not module.endswith(".py"):
        yield module
    package = Path(av.__file__).parent
    for folder in (package.parent / "av.libs", *sorted(package.parent.glob("*.libs")), package / ".dylibs"):
        yield from sorted(str(p) for p in folder.glob("*avformat*"))
