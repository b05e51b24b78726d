"""What PyAV does not expose of FFmpeg (read from the libraries PyAV itself loaded, through ctypes), and
FFmpeg's log routed through the project's logger.

Which options a muxer takes: FFmpeg's ``avformat_write_header`` leaves the options it did not use in
the dictionary it was given, but PyAV drops that dictionary (and passes none to the output protocol),
so an unknown ``--output-opt`` key used to vanish without a word. The same lookup FFmpeg makes
(``init_muxer``: the generic AVFormatContext options, then the muxer's private ones) tells which keys a
muxer will use. Where the libraries cannot be found (a PyAV built against a system FFmpeg), nothing is
refused: the check says it cannot tell.

The log: PyAV discards FFmpeg's lines by default, and some libraries print to stderr themselves (x264's
"invalid preset", x265's and SVT-AV1's banners), breaking the one-line promise. FFmpeg's lines (warnings
and errors, everything with ``--loglevel debug``) go to the ``pipeline`` logger at debug level; the
libraries' own prints are captured around the encoder's opening (:func:`captured_stderr`). Lines from
a context being watched (:func:`watch`: a demuxer, a decoder) are also kept for the one who watches.
PyAV's log callback takes the GIL from FFmpeg's threads: below the threshold it returns before, and
the source drains its decoder before closing it, so no thread is left logging while the GIL holder
waits for it (PyAV#751).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import logging
import os
import signal
import tempfile
import threading
from typing import Iterator

import av

from .config import file_url
from .log import log

# Tags that are not UTF-8 (a title in Latin-1): PyAV 19 reads them with surrogateescape and writes the same
# bytes back, as ffmpeg copies them; PyAV 18 fails the open unless told to replace them (with U+FFFD).
READ_TAGS = {"metadata_errors": "replace"} if int(av.__version__.split(".")[0]) < 19 else {}

_AV_OPT_SEARCH_CHILDREN = 1
_AV_OPT_SEARCH_FAKE_OBJ = 2


class _OutputFormat(ctypes.Structure):
    """The public head of FFmpeg's AVOutputFormat (stable since FFmpeg 5): enough to reach priv_class."""

    _fields_ = [("name", ctypes.c_char_p), ("long_name", ctypes.c_char_p), ("mime_type", ctypes.c_char_p),
                ("extensions", ctypes.c_char_p), ("audio_codec", ctypes.c_int), ("video_codec", ctypes.c_int),
                ("subtitle_codec", ctypes.c_int), ("flags", ctypes.c_int), ("codec_tag", ctypes.c_void_p),
                ("priv_class", ctypes.c_void_p)]


class _InputFormat(ctypes.Structure):
    """The public head of FFmpeg's AVInputFormat (the same since libavformat 56): enough to reach priv_class."""

    _fields_ = [("name", ctypes.c_char_p), ("long_name", ctypes.c_char_p), ("flags", ctypes.c_int),
                ("extensions", ctypes.c_char_p), ("codec_tag", ctypes.c_void_p), ("priv_class", ctypes.c_void_p)]


# Options every protocol's context takes (FFmpeg's ffurl_context_class, which its API does not expose).
_URL_CONTEXT_OPTIONS = frozenset({"protocol_whitelist", "protocol_blacklist", "rw_timeout"})


def _library(stem: str) -> ctypes.CDLL | None:
    """The copy of ``lib<stem>`` that PyAV's wheel bundles (the one already loaded), if there is one."""
    bundled = os.path.join(os.path.dirname(av.__file__), os.pardir, "av.libs", f"lib{stem}*.so*")
    paths = sorted(glob.glob(bundled))
    try:
        return ctypes.CDLL(paths[0]) if paths else None
    except OSError:
        return None


@functools.cache
def _functions():
    fmt, util = _library("avformat"), _library("avutil")
    if fmt is None or util is None:
        return None
    fmt.avformat_get_class.restype = ctypes.c_void_p
    fmt.av_guess_format.restype = ctypes.c_void_p
    fmt.av_guess_format.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p]
    fmt.av_find_input_format.restype = ctypes.c_void_p
    fmt.av_find_input_format.argtypes = [ctypes.c_char_p]
    fmt.avio_protocol_get_class.restype = ctypes.c_void_p
    fmt.avio_protocol_get_class.argtypes = [ctypes.c_char_p]
    util.av_opt_find.restype = ctypes.c_void_p
    util.av_opt_find.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    return fmt, util


def _has_option(av_class: int | None, key: str, flags: int) -> bool:
    _, util = _functions()
    if not av_class:
        return False
    fake = ctypes.c_void_p(av_class)  # a "fake object": a pointer to the class is all av_opt_find reads
    return bool(util.av_opt_find(ctypes.byref(fake), key.encode(), None, 0, flags | _AV_OPT_SEARCH_FAKE_OBJ))


def guessed_muxer(name: str) -> str | None:
    """The muxer FFmpeg chooses for an output named ``name`` (by its extension, ``av_guess_format``); None
    where it chooses none, or where this cannot be told here."""
    functions = _functions()
    if functions is None:
        return None
    pointer = functions[0].av_guess_format(None, os.fsencode(name), None)
    return _OutputFormat.from_address(pointer).name.decode() if pointer else None


def unused_muxer_options(muxer: str, keys) -> list[str] | None:
    """The ``keys`` the muxer named ``muxer`` would not use; None when this cannot be told here."""
    functions = _functions()
    if functions is None:
        return None
    fmt, _ = functions
    pointer = fmt.av_guess_format(muxer.encode(), None, None)
    if not pointer:
        return None
    private = _OutputFormat.from_address(pointer).priv_class
    generic = fmt.avformat_get_class()
    return [k for k in keys
            if not _has_option(generic, k, 0) and not _has_option(private, k, _AV_OPT_SEARCH_CHILDREN)]


def unused_demuxer_options(demuxer: str, protocol: str | None, keys) -> list[str] | None:
    """The ``keys`` that neither the demuxer named ``demuxer`` (generic or private options) nor the
    ``protocol`` it reads through (None: a device, no protocol) would use, as FFmpeg's
    ``avformat_open_input`` would leave them unused; None when this cannot be told here."""
    functions = _functions()
    if functions is None:
        return None
    fmt, _ = functions
    pointer = fmt.av_find_input_format(demuxer.split(",")[0].encode())
    if not pointer:
        return None
    classes = [(fmt.avformat_get_class(), 0), (_InputFormat.from_address(pointer).priv_class, _AV_OPT_SEARCH_CHILDREN)]
    if protocol is not None:
        classes.append((fmt.avio_protocol_get_class(protocol.encode()), _AV_OPT_SEARCH_CHILDREN))
    return [k for k in keys if k not in _URL_CONTEXT_OPTIONS and
            not any(_has_option(cls, k, flags) for cls, flags in classes)]


class _ToPipelineLog(logging.Handler):
    """PyAV's ``libav.<context>`` records: kept for watchers, then sent to the pipeline logger at debug."""

    def emit(self, record: logging.LogRecord) -> None:
        context = record.name.removeprefix("libav.")
        message = record.getMessage()
        with _WATCHES_LOCK:  # FFmpeg logs from any thread while watches come and go
            watches = list(_WATCHES)
        for w in watches:
            if context in w.contexts and record.levelno >= logging.WARNING:
                w.add(context, record.levelno, message, record.thread)
        log.debug(f"ffmpeg: [{context}] {message}")


_WATCHES: set[Watch] = set()
_WATCHES_LOCK = threading.Lock()
_ROUTED: list[int] = []


_SILENT: list[bool] = []  # set while many pipelines run side by side (see silence_ffmpeg_log)


def route_ffmpeg_log() -> None:
    """FFmpeg's warnings and errors (all its lines when the pipeline logger is at debug) into the pipeline
    logger, at debug. Idempotent; the threshold follows the pipeline logger's level each time."""
    if _SILENT:
        return
    threshold = av.logging.VERBOSE if log.isEnabledFor(logging.DEBUG) else av.logging.WARNING
    if _ROUTED == [threshold]:
        return
    libav = logging.getLogger("libav")
    if not any(isinstance(h, _ToPipelineLog) for h in libav.handlers):
        libav.addHandler(_ToPipelineLog())
    libav.setLevel(logging.DEBUG)  # PyAV's own threshold filters; this one must not
    libav.propagate = False  # never a second copy on stderr through the root logger
    av.logging.set_level(threshold)
    _ROUTED[:] = [threshold]


@contextlib.contextmanager
def silence_ffmpeg_log():
    """FFmpeg's log left unrouted while it lasts (PyAV's callback then returns without Python).

    A routed line is handed to Python from whatever thread FFmpeg logs in, which must take the GIL: with
    many streams opening and closing codecs at once, one thread can hold the GIL while it waits for a
    lock of FFmpeg's (the codec open lock) that another holds while it waits to log (PyAV#751). Many
    streams in one process (pipeline.many) run with FFmpeg's log silent; their damage is still counted
    from decode errors and corrupt frames, not from FFmpeg's own lines."""
    _SILENT.append(True)
    av.logging.set_level(None)
    _ROUTED.clear()
    try:
        yield
    finally:
        _SILENT.pop()


class Watch:
    """Warnings and errors FFmpeg logged from the contexts named (``mpegts``, ``h264``...), in order:
    (context, Python logging level, message); :attr:`threads` has the id of the thread that logged each."""

    def __init__(self, contexts):
        self.contexts = frozenset(contexts)
        self.lines: list[tuple[str, int, str]] = []
        self.threads: list[int | None] = []
        self._lock = threading.Lock()

    def add(self, context: str, level: int, message: str, thread: int | None = None) -> None:
        with self._lock:
            if len(self.lines) < 1000:  # a damaged file can log per packet: the first ones say enough
                self.lines.append((context, level, message))
                self.threads.append(thread)

    def take_with_threads(self) -> list[tuple[str, int, str, int | None]]:
        with self._lock:
            lines, threads, self.lines, self.threads = self.lines, self.threads, [], []
        return [(*line, thread) for line, thread in zip(lines, threads)]

    def take(self) -> list[tuple[str, int, str]]:
        return [line[:3] for line in self.take_with_threads()]

    def peek(self) -> list[tuple[str, int, str]]:
        """The lines so far, left for :meth:`take`."""
        with self._lock:
            return list(self.lines)

    def close(self) -> None:
        with _WATCHES_LOCK:
            _WATCHES.discard(self)


def watch(contexts) -> Watch:
    route_ffmpeg_log()
    w = Watch(contexts)
    with _WATCHES_LOCK:
        _WATCHES.add(w)
    return w


def quiet_encoder(name: str, options: dict[str, str]) -> dict[str, str]:
    """``options`` plus what keeps an encoder's own banner off stderr, unless the pipeline logs at debug
    or the user set it: x265's log-level, SVT-AV1's SVT_LOG (read once, at its first use)."""
    options = dict(options)
    if log.isEnabledFor(logging.DEBUG):
        return options
    if name == "libx265" and "log-level" not in options.get("x265-params", ""):
        options["x265-params"] = ":".join(p for p in (options.get("x265-params"), "log-level=error") if p)
    elif name == "libsvtav1":
        os.environ.setdefault("SVT_LOG", "1")  # errors only
    return options


# Libraries that print to stderr themselves, and the start of their lines.
_LIBRARY_PREFIXES = ("x264 [", "x265 [", "Svt[", "SVT [", "[SVT", "Svt ")


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """Lines written to file descriptor 2 inside the block (by C libraries too), instead of the terminal.
    Library lines are logged at debug after the block; anything else is written back as it came."""
    lines: list[str] = []
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all: nothing to protect
        yield lines
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines.extend(capture.read().decode("utf-8", "replace").splitlines())
            _release(lines)


def _release(lines: list[str]) -> None:
    others = []
    for line in lines:
        if line.startswith(_LIBRARY_PREFIXES):
            log.debug(line.strip())
        elif line.strip():
            others.append(line)
    if others:
        os.write(2, ("\n".join(others) + "\n").encode())


def library_errors(lines: list[str]) -> str:
    """The error lines a library printed, for the one-line message (x264's "invalid preset 'x'")."""
    return "; ".join(line.split("]:", 1)[-1].strip() for line in lines
                     if line.startswith(_LIBRARY_PREFIXES) and "error" in line.lower())


@functools.cache
def muxer_extensions() -> frozenset[str]:
    """The file name extensions FFmpeg chooses an output format by (``av_guess_format``'s table)."""
    import av

    found: set[str] = set()
    for name in av.formats_available:
        try:
            found.update(ext.strip().lower() for ext in av.format.ContainerFormat(name, "w").extensions)
        except ValueError:  # a demuxer only
            pass
    return frozenset(found)


def extensions_of(muxer: str) -> frozenset[str]:
    """The file name extensions of one muxer (``-f mpegts``: ts, m2t, m2ts, mts); none for an unknown name."""
    import av

    try:
        return frozenset(ext.strip().lower() for ext in av.format.ContainerFormat(muxer, "w").extensions)
    except ValueError:
        return frozenset()


def ffmpeg_name(path: str, input_format: str | None, local: bool) -> str:
    """A local file through FFmpeg's ``file:`` protocol (a ':' in its name is no protocol); a URL as it
    is, and a device as it is too: a capture demuxer (v4l2) opens the name itself, without protocols."""
    if not local or (input_format and av.format.ContainerFormat(input_format, "r").no_file):
        return path
    return file_url(path)


def drain_decoder(video) -> None:
    """Let the decoder's frame threads finish before the decoder is freed: PyAV frees it holding the GIL
    and waits for them, and one logging meanwhile would wait for the GIL (see route_ffmpeg_log)."""
    cc = getattr(video, "codec_context", None)
    if cc is None or not cc.is_open:
        return
    try:
        cc.decode(None)  # a flush packet; the GIL is released while the threads finish
    except (av.error.FFmpegError, ValueError):
        pass  # a decoder in error has nothing left to finish


def flush_encoder(stream) -> list:
    """The encoder's last packets (``stream.encode(None)``). On the main thread the flush runs on a thread of
    its own while this one waits in short steps: a slow encoder's flush (x264's lookahead at a slow preset)
    is seconds inside one C call, during which no signal handler runs, so a second Ctrl-C could not end the
    process at once. PyAV releases the interpreter's lock while the codec works. A KeyboardInterrupt (the
    API's caller) is raised once the flush is over: the encoder must not be closed under it."""
    if threading.current_thread() is not threading.main_thread():
        return stream.encode(None)
    entered, done, result = threading.Event(), threading.Event(), {}

    def flush() -> None:
        entered.set()
        try:
            result["packets"] = stream.encode(None)
        except BaseException as e:
            result["error"] = e
        finally:
            done.set()

    thread = threading.Thread(target=flush, name="pipeline-flush", daemon=True)
    # SIGINT held back while the thread starts: a Ctrl-C inside start() could leave it running unseen. It is
    # delivered when unblocked, inside the loop's try. The mask is read first by a call that changes nothing:
    # one that blocks may raise a pending Ctrl-C after it has blocked.
    before = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    interrupted, started = None, False
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        thread.start()
        started = True
    except KeyboardInterrupt as e:  # pending before the mask took, or not a signal (interrupt_main)
        interrupted = e
        started = thread.ident is not None or entered.wait(1.0)
    except RuntimeError:  # no thread to be had: flushed here, as it was
        pass
    finally:
        if not started:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
    if not started:
        if interrupted is not None:
            raise interrupted
        return stream.encode(None)
    unblocked = False
    while True:
        try:
            if not unblocked:
                unblocked = True
                signal.pthread_sigmask(signal.SIG_SETMASK, before)
            if done.wait(0.05):
                break
        except KeyboardInterrupt as e:
            interrupted = e
    if interrupted is not None:
        raise interrupted
    if "error" in result:
        raise result["error"]
    return result["packets"]


_AV_CODEC_CONFIG_COLOR_RANGE = 5  # enum AVCodecConfig
_AVCOL_RANGE_MPEG = 1


@functools.cache
def _codec_functions():
    codec = _library("avcodec")
    if codec is None or not hasattr(codec, "avcodec_get_supported_config"):  # FFmpeg 7.1 and later
        return None
    codec.avcodec_find_encoder_by_name.restype = ctypes.c_void_p
    codec.avcodec_find_encoder_by_name.argtypes = [ctypes.c_char_p]
    codec.avcodec_get_supported_config.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint,
                                                   ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int)]
    return codec


@functools.cache
def limited_range_only(encoder: str) -> bool | None:
    """Whether FFmpeg declares the encoder named ``encoder`` to code limited range only (its supported
    colour ranges; ffmpeg converts full-range frames for it); None where this cannot be told here."""
    codec = _codec_functions()
    pointer = codec.avcodec_find_encoder_by_name(encoder.encode()) if codec is not None else None
    if not pointer:
        return None
    values, count = ctypes.c_void_p(), ctypes.c_int(0)
    if codec.avcodec_get_supported_config(None, pointer, _AV_CODEC_CONFIG_COLOR_RANGE, 0, ctypes.byref(values),
                                          ctypes.byref(count)) < 0:
        return None
    if not values.value:  # nothing declared: any range
        return False
    ranges = ctypes.cast(values, ctypes.POINTER(ctypes.c_int))
    return [ranges[i] for i in range(count.value)] == [_AVCOL_RANGE_MPEG]
