"""What PyAV does not expose of FFmpeg, read from the FFmpeg libraries PyAV itself loaded (ctypes).

Which options a muxer takes: FFmpeg's ``avformat_write_header`` leaves the options it did not use in
the dictionary it was given, but PyAV drops that dictionary (and passes none to the output protocol),
so an unknown ``--output-opt`` key used to vanish without a word. The same lookup FFmpeg makes
(``init_muxer``: the generic AVFormatContext options, then the muxer's private ones) tells which keys a
muxer will use. Where the libraries cannot be found (a PyAV built against a system FFmpeg), nothing is
refused: the check says it cannot tell.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os

import av

_AV_OPT_SEARCH_CHILDREN = 1
_AV_OPT_SEARCH_FAKE_OBJ = 2


class _OutputFormat(ctypes.Structure):
    """The public head of FFmpeg's AVOutputFormat (stable since FFmpeg 5): enough to reach priv_class."""

    _fields_ = [("name", ctypes.c_char_p), ("long_name", ctypes.c_char_p), ("mime_type", ctypes.c_char_p),
                ("extensions", ctypes.c_char_p), ("audio_codec", ctypes.c_int), ("video_codec", ctypes.c_int),
                ("subtitle_codec", ctypes.c_int), ("flags", ctypes.c_int), ("codec_tag", ctypes.c_void_p),
                ("priv_class", ctypes.c_void_p)]


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
    util.av_opt_find.restype = ctypes.c_void_p
    util.av_opt_find.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    return fmt, util


def _has_option(av_class: int | None, key: str, flags: int) -> bool:
    _, util = _functions()
    if not av_class:
        return False
    fake = ctypes.c_void_p(av_class)  # a "fake object": a pointer to the class is all av_opt_find reads
    return bool(util.av_opt_find(ctypes.byref(fake), key.encode(), None, 0, flags | _AV_OPT_SEARCH_FAKE_OBJ))


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
