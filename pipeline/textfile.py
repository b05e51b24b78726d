"""Reading the small text files a run is configured with (TOML presets, .cube LUTs) without blocking.

Set-up runs in the main thread before any stop can be honoured: a read that never returns (a FIFO with
no writer) or never ends (``/dev/zero``, until memory runs out) would make the run unstoppable. So only
regular files are read, opened without blocking, and no further than a stated limit.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import ConfigError


def read_text(path: Path | str, limit: int, what: str) -> str:
    """The UTF-8 text of ``path`` (a BOM dropped). Every refusal is a ConfigError that starts with ``what``
    and names the file: missing, not a regular file, larger than ``limit`` bytes, unreadable, not text."""
    path = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, here, forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ConfigError(f"{what}: file not found: {path}") from None
    except OSError as e:
        raise ConfigError(f"{what}: cannot read {path}: {e.strerror}") from None
    try:
        data = _read_regular(fd, path, limit, what)
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what}: cannot read {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _read_regular(fd: int, path: Path, limit: int, what: str) -> bytes:
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{what}: {path} is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{what}: {path} is not a regular file (a FIFO or a device); only regular files are read")
    if info.st_size > limit:
        raise ConfigError(f"{what}: {path} is {info.st_size} bytes; the limit is {limit} bytes ({limit >> 20} MiB)")
    os.set_blocking(fd, True)
    chunks, total = [], 0
    try:
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # the file grew after fstat: still no further than the limit
                raise ConfigError(f"{what}: {path} is larger than the limit of {limit} bytes ({limit >> 20} MiB)")
    except OSError as e:
        raise ConfigError(f"{what}: cannot read {path}: {e.strerror}") from None
    return b"".join(chunks)
