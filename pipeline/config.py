"""Run configuration: a frozen dataclass built from defaults, a TOML file, then command-line flags."""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import re
import stat
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .memory.registry import STRATEGIES

DEVICES = ("auto", "cuda", "cpu")  # and cuda:N, a GPU by its index
DECODERS = ("cpu", "nvdec", "auto")
DEFAULT_FILTERS = "gblur=sigma=1.5,eq=contrast=1.1:saturation=1.1"
# "auto": block for a file read as fast as possible (every frame comes out), drop-oldest for a live or
# paced source (it cannot wait, so the freshest frames go through and latency stays bounded).
DROP_POLICIES = ("auto", "block", "drop-oldest", "drop-newest")
AUDIO_MODES = ("copy", "encode", "none")  # what the output does with the input's audio (pipeline.audio_out)

# Upper bounds of the settings that size what a run sets up, each far past where it stops helping: a run
# takes what they ask for up front, so an unbounded one allocates until the memory runs out.
# A frame in flight holds an arena block and five CUDA events, and the queues between stages are as deep;
# the GPU overlaps a handful of frames (its copy engines and streams), not dozens.
MAX_IN_FLIGHT = 64
# CUDA_DEVICE_MAX_CONNECTIONS' largest value: more streams than the device has hardware queues share them.
MAX_STREAMS = 32
MAX_NVDEC_SESSIONS = 16  # sessions on one file; PEERS.md: NVDEC's total stops growing at 12-16
# A slot is held from decode to upload, or from download to encode: by a frame in flight or one in the queue
# beside it, so about 2 * MAX_IN_FLIGHT + 2 at most are busy at once; more slots only pin memory.
MAX_RING_SIZE = 256
# The arena holds the frames in flight (and those a consumer keeps) at once, nothing more: a multiple past
# a few only reserves device memory no frame can use (and a huge one overflows the size computed from it).
MAX_ARENA_HEADROOM = 4.0
# -ss, -t and -to: about 31 years. FFmpeg's time bases have denominators below 2**31, so a time this far in
# is still a 64-bit timestamp in any stream's ticks (where the input seeks to it); 1e20 s is not.
MAX_SECONDS = 10**9


class DefaultCodec(str):
    """The video encoder no one chose: libx264, equal to the name as any string is. Its type alone tells
    it from a ``-c libx264`` someone gave (:func:`pipeline.build.for_muxer` gives a container that cannot
    take H.264 its own encoder in its place, as ffmpeg does, but honours a choice). A pickled copy (a
    batch worker's) keeps the type."""


DEFAULT_CODEC = DefaultCodec("libx264")


def is_default_codec(codec: str) -> bool:
    return type(codec) is DefaultCodec


@dataclass(frozen=True)
class RunConfig:
    input: str = ""
    output: str | None = None
    filters: str = DEFAULT_FILTERS
    device: str = "auto"
    decode: str = "auto"  # cpu, nvdec or auto (NVDEC on a CUDA GPU when it takes the stream, else the CPU)
    nvdec_sessions: int = 4  # NVDEC sessions sharing a file's GOPs (pipeline.gops); 1: one decoder
    codec: str = DEFAULT_CODEC
    encoder_opts: dict[str, str] = field(default_factory=dict)
    # The encoder's pixel format (yuv420p, yuv420p10le, or another it takes); None: the input's bit depth
    # where the encoder takes it, else 8 bits with a notice (pipeline.encoders.output_format).
    pix_fmt: str | None = None
    frames: int | None = None
    stats_json: str | None = None
    quiet: bool = False
    overwrite: bool = False
    alloc: str = "pool"
    ring_size: int = 8
    streams: int = 2
    in_flight: int = 4
    copy_threads: int = 1  # threads copying decoded frames into host slots (1: the decode thread itself)
    pinned_cap_mib: int | None = None  # page-locked host memory a run may take; None: half of the RAM
    write_combined: bool = False  # input slots in write-combined pinned memory (the CPU only writes them)
    arena_headroom: float = 1.2
    plugins: tuple[str, ...] = ()
    strict: bool = False
    debug: bool = False
    # Real time (issue 6): live sources and sinks, pacing, drops, latency.
    input_format: str | None = None  # demuxer or device (v4l2); None: FFmpeg guesses
    input_opts: dict[str, str] = field(default_factory=dict)  # demuxer/protocol options (av.open)
    output_format: str | None = None  # muxer; None: from the output name (or the URL scheme)
    output_opts: dict[str, str] = field(default_factory=dict)  # muxer/protocol options
    timeout: float = 10.0  # live sources: open timeout, read timeout and stall watchdog, seconds
    reconnect: int = 0  # live sources: reopen attempts per outage before giving up
    realtime: bool = False  # pace a file at its own frame rate, as a camera would deliver it
    drop_policy: str = "auto"
    latency_budget: float | None = None  # ms, decoded to packet out; warn once and count
    preview: bool = False
    nvtx: bool = False
    # A span of the input (ffmpeg's -ss, -t, -to), seconds counted from the input's start; see pipeline/span.py.
    start: float | None = None
    duration: float | None = None
    end: float | None = None
    audio: str = "copy"  # copy where the container takes the codec, else encode; or encode; or none

    def __post_init__(self) -> None:
        _check_types(self)
        for name in ("input", "output", "stats_json"):  # a file:// URL of this machine is that file
            object.__setattr__(self, name, file_url_as_path(getattr(self, name)))
        _check_finite(self)
        _check_text(self)  # after: %00 in a URL is a NUL in its file's name
        # -f "$FMT" with FMT unset; an empty output or report name would have meant the default, or none
        for name in ("input_format", "output_format", "codec", "pix_fmt", "output", "stats_json"):
            if getattr(self, name) == "":
                hint = "none" if name == "stats_json" else "the default"
                raise ConfigError(f"{name} is an empty name (an unset shell variable?); leave it out for {hint}")
        for name in ("input_format", "output_format"):  # FFmpeg matches format names in any case: -f HLS is hls
            if getattr(self, name):
                object.__setattr__(self, name, getattr(self, name).lower())
        check_device(self.device)
        _check_choice("decode", self.decode, DECODERS)
        _check_choice("alloc", self.alloc, tuple(STRATEGIES))
        check_int("ring_size", self.ring_size, 2, MAX_RING_SIZE)
        check_int("streams", self.streams, 1, MAX_STREAMS)
        check_int("in_flight", self.in_flight, 1, MAX_IN_FLIGHT)
        check_int("copy_threads", self.copy_threads, 1)
        check_int("nvdec_sessions", self.nvdec_sessions, 1, MAX_NVDEC_SESSIONS)
        if self.pinned_cap_mib is not None:
            check_int("pinned_cap_mib", self.pinned_cap_mib, 1)
        if self.frames is not None:
            check_int("frames", self.frames, 1)
        _check_between("arena_headroom", self.arena_headroom, 1.0, MAX_ARENA_HEADROOM)
        _check_choice("drop_policy", self.drop_policy, DROP_POLICIES)
        _check_choice("audio", self.audio, AUDIO_MODES)
        _check_positive("timeout", self.timeout)
        _check_between("timeout", self.timeout, 0, MAX_SECONDS, "numbers of seconds")
        if not isinstance(self.reconnect, int) or isinstance(self.reconnect, bool) or self.reconnect < 0:
            raise ConfigError(f"Invalid reconnect ({self.reconnect!r}). Supported values are integers >= 0.")
        if self.latency_budget is not None:
            _check_positive("latency_budget", self.latency_budget)
            _check_between("latency_budget", self.latency_budget, 0, MAX_SECONDS * 1000, "milliseconds")
        _check_span(self.start, self.duration, self.end)
        _check_pipes(self.input, self.output, self.output_format)

    def output_path(self) -> Path:
        """The output file: ``-o`` if given, else ``<input stem>_processed<ext>`` in the current directory.

        A URL output is not a path: see :meth:`output_target`."""
        if self.output:
            if self.output.endswith(("/", os.sep)):  # Path() would drop the "/" and write a file of that name
                from .errors import OutputError

                raise OutputError(f"{self.output}: names a directory (it ends with /); name the output file")
            path = Path(self.output)
            # ./- and ./pipe:1 name files; Path drops the ./, and "-" would then be written to stdout
            return Path.cwd() / path if is_pipe_name(str(path)) else path
        if is_url(self.input):
            raise ConfigError(f"{self.input}: a URL input needs -o/--output (a file or a stream URL)")
        if pipe_fd(self.input) is not None:
            raise ConfigError("reading from stdin needs -o/--output (a file, a stream URL, or - for stdout)")
        from .many import muxer_suffix, output_extension
        from .outfile import fit_name, name_max

        # As in a directory (-o ./): the extension -f's, else the input's where FFmpeg writes it (else .mkv,
        # which takes any codec; .mp4 for an input without one); a long stem shortened to fit.
        src = Path(self.input)
        suffix = output_extension(src) if src.suffix else ".mp4"
        suffix = muxer_suffix(self.output_format, suffix) if self.output_format else suffix
        stem = fit_name(src.stem, name_max(Path.cwd()) - len(os.fsencode(f"_processed{suffix}")))
        return Path.cwd() / f"{stem}_processed{suffix}"

    def output_target(self) -> Path | str:
        """Where the output goes: a path, or the URL string itself (``Path`` would fold its ``//``)."""
        if self.output and pipe_fd(self.output, 1) is not None:
            return f"pipe:{pipe_fd(self.output, 1)}"
        return self.output if self.output and is_url(self.output) else self.output_path()

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(name: str | None) -> bool:
    """``scheme://...``: handed to FFmpeg as it is, never checked or created as a local path."""
    return bool(name) and _URL.match(name) is not None


def local_path(name: str | Path | None, dash: bool = True) -> Path | None:
    """Where on this machine ``name`` reads or writes: the path itself, the file of a ``file://`` URL (which
    FFmpeg's file protocol opens directly), the file behind a pipe (``pipe:N``, and ``-`` for stdin unless
    ``dash`` is false: a report named ``-`` is a file of that name); None for a stream URL or a pipe that is
    not a file."""
    if not name:
        return None
    if isinstance(name, Path) or (name == "-" and not dash):
        return Path(name)
    fd = pipe_fd(name)
    if fd is not None:
        try:
            return Path(f"/dev/fd/{fd}") if stat.S_ISREG(os.fstat(fd).st_mode) else None
        except (OSError, OverflowError):  # OverflowError: pipe:N past any descriptor (RunConfig refuses it)
            return None
    if name[:7].lower() == "file://":
        parts = _file_url_parts(name)
        return Path(_url_path(parts)) if parts.netloc.lower() in ("", "localhost") else None
    if name.startswith("file:"):  # FFmpeg's file protocol: the rest is the path
        return Path(name[5:]) if name[5:] else None
    return None if is_url(name) else Path(name)


def _file_url_parts(name: str) -> urllib.parse.SplitResult:
    try:
        return urllib.parse.urlsplit(name)
    except ValueError as e:  # file://[x: an IPv6 host never closed
        raise ConfigError(f"{name}: not a valid URL ({e})") from None


def _url_path(parts: urllib.parse.SplitResult) -> str:
    """The path of a file URL as this machine names files: %XX are bytes (%ff is the byte 0xff, not U+FFFD)."""
    return os.fsdecode(urllib.parse.unquote_to_bytes(parts.path))


_CUDA_INDEX = re.compile(r"^cuda:([0-9]+)$")  # ASCII digits only (see pipeline/numbers.py)


def check_device(device: Any) -> None:
    if device in DEVICES or (isinstance(device, str) and _CUDA_INDEX.match(device)):
        return
    raise ConfigError(f"Invalid device ({device!r}). Supported values are auto, cuda, cuda:N (a GPU's index), cpu.")


def device_index(device: str) -> int | None:
    """N for ``cuda:N``; None for auto, cuda and cpu."""
    match = _CUDA_INDEX.match(device)
    return int(match.group(1)) if match else None


_PIPE = re.compile(r"^pipe:([0-9]*)$")


def pipe_fd(name: str | None, default: int = 0) -> int | None:
    """``-`` or ``pipe:`` (stdin for an input, stdout for an output: ``default``), ``pipe:N``: the file
    descriptor FFmpeg's pipe protocol reads or writes; None for any other name."""
    if name == "-":
        return default
    match = _PIPE.match(name or "")
    if match is None:
        return None
    return int(match.group(1)) if match.group(1) else default


def is_pipe_name(name: str | None) -> bool:
    """Whether ``name`` is ``-`` or in FFmpeg's pipe protocol (``pipe:N``, or a malformed ``pipe:x``, which
    FFmpeg takes for stdin or stdout): not a local file's name (``./pipe:x`` is one)."""
    return name == "-" or (name or "").startswith("pipe:")


def _check_span(start: float | None, duration: float | None, end: float | None) -> None:
    for name, value in (("start", start), ("end", end)):
        if value is not None:
            _check_between(name, value, 0, MAX_SECONDS, "numbers of seconds")
    if duration is not None:
        _check_positive("duration", duration)
        _check_between("duration", duration, 0, MAX_SECONDS, "numbers of seconds")
    if duration is not None and end is not None:
        raise ConfigError("-t/--duration and -to/--end are exclusive: give one")
    if end is not None and end <= (start or 0):
        raise ConfigError(f"Invalid end ({end!r}): it must come after the start ({start or 0!r})")


MAX_FD = 2**31 - 1  # a file descriptor is a C int


def _check_pipes(source: str | None, output: str | None, output_format: str | None) -> None:
    for name in (source, output):
        fd = pipe_fd(name)
        if (fd is not None and fd > MAX_FD) or (fd is None and is_pipe_name(name)):
            raise ConfigError(f"{name}: pipe:N takes a file descriptor, 0 to {MAX_FD} (./{name} names a file)")
    if pipe_fd(output, 1) is not None and not output_format:
        raise ConfigError(f"{output}: writing to a pipe needs an output format, there is no file name to take it "
                          "from: -f/--format (e.g. -f mpegts, -f matroska, -f mp4)")


def file_url_as_path(name: str | None) -> str | None:
    """The local path of a ``file://`` URL on this machine, so that an output so named is written as any file is
    (its muxer from its extension, replaced only with -y, through a temporary file); other names stay as given.
    Refused: another host (FFmpeg's file protocol would open ``//host/path``, a local file all the same), and a
    query or fragment (FFmpeg would read ``take#1.mp4`` as the name, a URL as ``take``).

    ``file:PATH`` without the slashes is FFmpeg's file protocol, what its users write to keep a ':' in a name
    from reading as a protocol: PATH as it stands, no %XX decoded (``file:12:30.mp4`` is ``12:30.mp4``)."""
    if name and name.startswith("file:") and name[5:7] != "//":  # FFmpeg's protocol names have one case
        return _file_protocol_path(name)
    if not (name and name[:7].lower() == "file://"):
        return name
    parts = _file_url_parts(name)
    if parts.netloc.lower() not in ("", "localhost"):  # FFmpeg would open file://tmp/x.mp4 as //tmp/x.mp4
        raise ConfigError(f"{name}: a file URL names a file of this machine: file:///path (three slashes) or "
                          "file://localhost/path")
    if parts.query or parts.fragment or "?" in name or "#" in name:
        raise ConfigError(f"{name}: a file URL with '?' or '#' is ambiguous; give the path itself (or %3F, %23)")
    if not parts.path:
        raise ConfigError(f"{name}: names no file")
    path = _url_path(parts)
    if "\0" in path:
        raise ConfigError(f"{name}: the name holds a NUL character (%00)")
    # "dir/" stays a directory's name: file:///x/a.mp4/ must not replace a.mp4
    return str(Path(path)) + ("/" if path.endswith("/") and path.strip("/") else "")


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _file_protocol_path(name: str) -> str:
    path = name[5:]
    if not path:
        raise ConfigError(f"{name}: names no file")
    if path in ("-", "null") or _SCHEME.match(path):  # stdio, the null output, pipe:1, udp://: a file so named
        return f"./{path}"  # (which RunConfig.output_path keeps a file)
    return path


def path_text(value: str | os.PathLike | bytes | bytearray) -> str:
    """A name given as a path, as text. A ``Path`` (or bytes) names a file whatever it holds, so one that
    FFmpeg's file protocol would read (``Path("file:x.mp4")``) gets ``./``; a str is read as on the
    command line."""
    if isinstance(value, str):
        return value
    text = os.fsdecode(bytes(value) if isinstance(value, bytearray) else value)
    return f"./{text}" if text.startswith("file:") else text


def file_url(path: str) -> str:
    """A local path as FFmpeg must be given it, through its ``file:`` protocol: otherwise a name holding a
    ':' ("meeting12:30.mp4", "C:\\clips\\a.mp4") is read as a protocol ("meeting12") and not found.
    Always added, so that a file really named "file:x" stays that file."""
    return "file:" + path


_PATHS = ("input", "output", "stats_json")  # str or os.PathLike, kept as str


def _check_types(cfg: RunConfig) -> None:
    """Each field of the type it is read as, so that the API's callers get a ConfigError naming it, not a
    TypeError from deep inside (``overwrite="false"`` would have been true). Paths may be os.PathLike and
    option values numbers: both are kept as text, as a config file's are."""
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if value is None and f.default is None:
            continue
        if f.name in _PATHS and isinstance(value, (os.PathLike, bytes, bytearray)):
            value = path_text(value)
            object.__setattr__(cfg, f.name, value)
        elif (number := _python_scalar(value)) is not value:
            value = number
            object.__setattr__(cfg, f.name, value)
        if f.name in _TABLES:
            object.__setattr__(cfg, f.name, _text_table(f.name, value))
        elif f.name == "plugins":
            object.__setattr__(cfg, f.name, _plugin_paths(value))
        elif message := _wrong_type(f.name, value):
            raise ConfigError(message)


MAX_INT_BITS = 4096  # past this an integer has no repr() (Python's 4300-digit limit)


def _wrong_type(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be the text or true/false field ``name`` (numbers have range checks of their own,
    which refuse text and bools). bool is an int in Python; ``true`` is never a frame count."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:  # no repr()
        return f"Invalid {name} (an integer of {value.bit_length()} bits). Supported values are far smaller."
    expected = (str,) if name in _PATHS else _TYPES.get(name)
    if expected in ((str,), (bool,)) and not isinstance(value, expected):
        return f"Invalid {name} ({safe_repr(value)}). Supported values are of type {expected[0].__name__}."
    return None


def is_int(value: Any) -> bool:
    """An integer, Python's or NumPy's; not a bool (True is 1 to Python, never a size or a count)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)  # NumPy's bool_ is not Integral


def safe_repr(value: Any) -> str:
    """``repr(value)``, which an integer of thousands of digits (or a list holding one) does not have."""
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        return f"<an integer of {value.bit_length()} bits>"
    if not isinstance(value, type) and hasattr(value, "shape") and hasattr(value, "dtype") and getattr(value, "ndim", 0):
        # an array, not pages of its digits (np.float32 itself, a class, has these as descriptors)
        return f"<{type(value).__name__} of shape {tuple(value.shape)} {value.dtype}>"
    try:
        text = repr(value)
    except ValueError:
        return f"<a {type(value).__name__} holding an integer too long to write out>"
    return text if len(text) <= 200 else text[:200] + "..."


def _text_table(name: str, table: Any) -> dict[str, str]:
    """An option table, a mapping of text keys to text or numbers, with its values as text."""
    flag = _table_flag(name)
    if not isinstance(table, Mapping):
        raise ConfigError(f"Invalid {flag} ({safe_repr(table)}): options are a mapping of KEY to VALUE")
    text = {}
    for key, value in table.items():
        value = _python_scalar(value)
        if not isinstance(key, str) or not isinstance(value, (str, int, float)):
            raise ConfigError(f"Invalid {flag} {safe_repr(key)}={safe_repr(value)}: keys are text, values text or numbers")
        if message := _wrong_type(f"{flag} {key!r}", value):  # an integer too long to write out
            raise ConfigError(message)
        text[key] = str(value)
    return text


def _python_scalar(value: Any) -> Any:
    """A NumPy scalar (np.int64 from arithmetic, np.float32) as the Python number it holds; else ``value``."""
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
        return value.item()
    return value


def _table_flag(name: str) -> str:
    return f"--{name[:-1].replace('_', '-')}"  # encoder_opts: --encoder-opt


def _plugin_paths(value: Any) -> tuple[str, ...]:
    path_types = (str, bytes, bytearray, os.PathLike)  # as the input's and output's: text, bytes or Path
    items = [value] if isinstance(value, path_types) else value if isinstance(value, (list, tuple)) else None
    if items is None or not all(isinstance(v, path_types) for v in items):
        raise ConfigError(f"Invalid plugins ({safe_repr(value)}). Supported values are a list of paths.")
    paths = tuple(v if isinstance(v, str) else path_text(v) for v in items)
    if not all(isinstance(v, str) and v for v in paths):
        raise ConfigError(f"Invalid plugins ({value!r}). Supported values are paths as text, none empty.")
    return tuple(map(file_url_as_path, paths))  # a file:// URL is its file, as on the command line


def _check_finite(cfg: RunConfig) -> None:
    """NaN and infinity compare false with every bound, so range checks let them through: refuse them
    first, in every field and in every option table (``crf=nan`` would reach the encoder as NaN)."""
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"Invalid {f.name} ({value!r}). Supported values are finite numbers.")
        if isinstance(value, dict):
            for key, text in value.items():
                if is_non_finite(text):
                    raise ConfigError(f"Invalid {f.name} value {key}={text!r}. Supported values are finite numbers.")


def is_non_finite(value: Any) -> bool:
    """A float, or text that parses as one ('nan', 'inf', '-Infinity'), that is not a finite number."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return False
    return isinstance(value, float) and not math.isfinite(value)


def _check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"Invalid {name} ({value!r}). Supported values are numbers > 0.")


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"Invalid {name} ({value!r}). Supported values are {', '.join(allowed)}.")


def check_int(name: str, value: int, low: int, high: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        supported = f"integers >= {low}" if high is None else f"integers from {low} to {high}"
        raise ConfigError(f"Invalid {name} ({safe_repr(value)}). Supported values are {supported}.")


def _check_between(name: str, value: Any, low: float, high: float, what: str = "numbers") -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ConfigError(f"Invalid {name} ({value!r}). Supported values are {what} from {low:,} to {high:,}.")


_TYPES: dict[str, tuple[type, ...]] = {
    "output": (str,), "filters": (str,), "device": (str,), "decode": (str,), "codec": (str,), "stats_json": (str,),
    "pix_fmt": (str,),
    "alloc": (str,), "frames": (int,), "ring_size": (int,), "streams": (int,), "in_flight": (int,),
    "copy_threads": (int,), "nvdec_sessions": (int,), "pinned_cap_mib": (int,), "write_combined": (bool,),
    "arena_headroom": (int, float), "quiet": (bool,), "overwrite": (bool,), "strict": (bool,), "debug": (bool,),
    "input_format": (str,), "output_format": (str,), "timeout": (int, float), "reconnect": (int,),
    "realtime": (bool,), "drop_policy": (str,), "latency_budget": (int, float), "preview": (bool,), "nvtx": (bool,),
    "start": (int, float), "duration": (int, float), "end": (int, float),
    "audio": (str,),
}
_TABLES = ("encoder_opts", "input_opts", "output_opts")  # KEY = VALUE tables, values kept as strings
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_text(cfg: "RunConfig") -> None:
    """No value holds NUL, which ends a C string (the system and FFmpeg would read a shorter name than the
    one given, and Python refuses it). An option table is a mapping whose keys hold no control character:
    FFmpeg takes none, and its log would split the message that names it over lines. So do an encoder
    option's values; a demuxer's or muxer's may hold tabs and line breaks (HTTP's ``headers`` are
    CRLF-separated)."""
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if f.name in _TABLES:
            _check_table(f.name, value)
            continue
        for text in value if isinstance(value, tuple) else (value,):
            if isinstance(text, str) and "\0" in text:
                raise ConfigError(f"Invalid {f.name} ({text!r}): it holds a NUL character")


_CONTROL_IN_VALUE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # tabs and line breaks allowed


def _check_table(name: str, table: dict[str, str]) -> None:
    flag = _table_flag(name)
    in_value = _CONTROL if name == "encoder_opts" else _CONTROL_IN_VALUE
    for key, item in table.items():
        if _CONTROL.search(key) or in_value.search(item):  # text by now (_check_types)
            allowed = "" if name == "encoder_opts" else " but tabs and line breaks"
            raise ConfigError(f"Invalid {flag} {key!r}={item!r}: keys hold no control characters, values none"
                              f"{allowed}")


SPAN_LENGTH = ("duration", "end")  # -t and -to: one or the other


def under_the_span_flags(values: dict[str, Any], flag_values: dict[str, Any]) -> dict[str, Any]:
    """A config file's (or [[streams]] entry's) ``values`` without their span's length where a flag gives
    one (-t or -to): it replaces the file's, whichever way the file gave it, the two ways being exclusive."""
    if not any(flag_values.get(key) is not None for key in SPAN_LENGTH):
        return values
    return {k: v for k, v in values.items() if k not in SPAN_LENGTH}


def build_config(file_values: dict[str, Any], flag_values: dict[str, Any]) -> RunConfig:
    """Defaults, then the file (see :func:`under_the_span_flags`), then the flags that were given on the
    command line (not None)."""
    merged = under_the_span_flags(file_values, flag_values)
    for key, value in flag_values.items():
        if value is None:
            continue
        if key in _TABLES:
            merged[key] = {**merged.get(key, {}), **value}
        else:
            merged[key] = value
    try:
        return RunConfig(**merged)
    except TypeError as e:
        raise ConfigError(str(e)) from e
