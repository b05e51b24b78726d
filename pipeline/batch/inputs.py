"""The batch's file list: inputs given as paths, globs or ``@list`` files, and where each output goes."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from ..checks import check_reachable, real_path, special_kind
from ..config import file_url_as_path, path_text
from ..errors import ConfigError, OutputError
from ..log import log
from ..many import muxer_suffix, output_extension
from ..textfile import read_text

LIST_LIMIT = 16 << 20  # a million paths; a list larger than that is a device or a runaway file


def expand_inputs(items: Sequence[str | os.PathLike], lists: list[Path] | None = None) -> list[Path]:
    """Paths in the order given, each once (a link or a hard link to a file named before is that file).
    ``@FILE`` reads FILE: one input per line (a path or a glob, relative to the current directory, as on
    the command line); blank lines and ``#`` comments are skipped; ``lists`` gets each list's path. A glob
    that matches nothing is refused, as is an empty list; a name whose only pattern is ``[...]`` and
    that matches nothing is a name. A plain path is kept even when it is missing: that file fails alone,
    with the input error ``pipeline run`` gives."""
    paths: list[Path] = []
    seen: dict[object, Path] = {}
    for path in _expand(items, depth=0, lists=[] if lists is None else lists):
        key = _identity(path)
        if key not in seen:
            seen[key] = path
            paths.append(path)
        elif path != seen[key]:  # a link to it, or another spelling: said, so the count adds up
            log.info(f"{path}: the same file as {seen[key]}; run once")
    if not paths:
        raise ConfigError("no input files given")
    return paths


def _identity(path: Path) -> object:
    """What makes two names one file: its device and inode where it exists, else its resolved path."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return real_path(path)
    return st.st_dev, st.st_ino


def _expand(items: Iterable[str | os.PathLike], depth: int, lists: list[Path]) -> Iterable[Path]:
    for item in items:
        text = file_url_as_path(path_text(item))  # a file:// URL of this machine names its file, as for run
        # os.path.exists: False, not PermissionError, for a name in a directory that cannot be entered
        if text.startswith("@") and not os.path.exists(text):
            if depth >= 8:
                raise ConfigError(f"{text}: @lists nested more than 8 deep (does a list name itself?)")
            if text == "@":
                raise ConfigError("@: an input list with an empty name (an unset shell variable?)")
            name = file_url_as_path(text[1:])
            lists.append(Path(name))
            yield from _expand(_read_list(name), depth + 1, lists)
        elif glob.has_magic(text) and not os.path.exists(text):
            matches = sorted(glob.glob(text, recursive=True))
            files = [m for m in matches if not Path(m).is_dir()]
            if files:
                yield from map(Path, files)
            elif "*" in text or "?" in text:
                raise ConfigError(f"{text}: no file matches")
            else:  # "clip[1].mp4": more likely a missing file's name than a pattern
                yield Path(text)
        else:
            yield Path(text)


def check_lists_kept(lists: Sequence[Path], outputs: Sequence[Path | None]) -> None:
    """No output replaces an input list (``@a_processed.mp4``), even with -y: the list is the user's."""
    named = {real_path(lst): lst for lst in lists if special_kind(lst) is None}
    for out in outputs:
        if out is not None and real_path(out) in named:
            raise ConfigError(f"{out}: an output would replace the input list {named[real_path(out)]}; "
                              "choose another -o or --suffix")


def _read_list(name: str) -> list[str]:
    """The entries of ``@name``: a regular file, or a pipe (``@/dev/stdin``, ``@<(find ...)``), read no
    further than LIST_LIMIT. A device is refused: ``@/dev/zero`` would be read until memory runs out."""
    kind = special_kind(name)
    if kind == "FIFO":
        text = _read_pipe(name)
    elif kind is not None:
        raise ConfigError(f"input list: {name} is a {kind}; only a regular file or a pipe is read")
    else:
        text = read_text(name, LIST_LIMIT, "input list")
    entries = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    for entry in entries:
        if "\0" in entry:  # no file name holds one (a binary file given as the list?)
            raise ConfigError(f"input list: {name}: the entry {entry!r} holds a NUL character")
        try:
            file_url_as_path(entry.removeprefix("@"))  # refused here, where the list can be named
        except ConfigError as e:
            raise ConfigError(f"input list: {name}: {e}") from None
    return entries


def _read_pipe(name: str) -> str:
    try:
        with open(name, "rb") as f:  # waits for a writer, as cat does (Ctrl-C ends the wait)
            data = f.read(LIST_LIMIT + 1)
    except OSError as e:
        raise ConfigError(f"input list: cannot read {name}: {e.strerror or e}") from e
    if len(data) > LIST_LIMIT:
        raise ConfigError(f"input list: {name} is larger than the limit of {LIST_LIMIT} bytes "
                          f"({LIST_LIMIT >> 20} MiB)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"input list: cannot read {name}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def output_for(source: Path, directory: Path, suffix: str, muxer: str | None = None) -> Path:
    """``DIR/<stem><suffix><ext>``, as ``pipeline run`` names the outputs of several inputs (``<ext>``: see
    :func:`pipeline.many.output_extension`, and :func:`pipeline.many.muxer_suffix` for ``-f``)."""
    extension = output_extension(source)
    return directory / f"{source.stem}{suffix}{muxer_suffix(muxer, extension) if muxer else extension}"


def outputs_for(sources: Sequence[Path], directory: Path, suffix: str, muxer: str | None = None) -> list[Path]:
    """Each input's output. Refused before any work: a suffix that is not part of a name, two inputs
    that would write the same file, and an output that is an input (a glob over the inputs' own
    directory picks up the last batch's outputs: under ``-y`` one would be replaced by another's)."""
    check_suffix(suffix)
    outputs = [output_for(s, directory, suffix, muxer) for s in sources]
    owner: dict[Path, Path] = {}
    for source, out in zip(sources, outputs):
        if out in owner:
            raise ConfigError(f"{owner[out]} and {source} would both write {out}; "
                              "rename one, or run them in separate batches")
        owner[out] = source
    inputs = {real_path(source): source for source in sources}
    for source, out in zip(sources, outputs):
        other = inputs.get(real_path(out))
        if other is not None:
            what = "the input itself" if other == source else f"an input too ({other})"
            raise ConfigError(f"{source}: its output {out} is {what}; choose another -o or --suffix")
    return outputs


def check_suffix(suffix: str) -> None:
    """A separator in the suffix would put outputs outside DIR (``--suffix /../../x``); a NUL cannot be
    in a file name at all."""
    if any(c and c in suffix for c in ("/", os.sep, os.altsep, "\0")):
        raise ConfigError(f"--suffix {suffix!r}: a path separator or a NUL; the suffix is part of a file name")


def prepare_directory(directory: Path) -> None:
    """Create the output directory (and its parents) if needed; refuse one that cannot be written."""
    check_reachable(directory, "the output directory")
    if directory.exists() and not directory.is_dir():
        raise OutputError(f"{directory}: not a directory; -o names the directory the outputs go into")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{directory}: cannot create the output directory: {e.strerror or e}") from e
    if not os.access(directory, os.W_OK):
        raise OutputError(f"{directory}: the output directory is not writable")


@contextlib.contextmanager
def claim_directory(directory: Path | None) -> Iterator[None]:
    """Hold ``directory`` for one batch: a second batch writing into it at the same time is refused. Its
    runs would find the first's outputs appearing (and fail), and each run removes its output's resume
    marker before it starts, so the first batch's complete outputs would be left without one.

    The lock is an flock on the directory itself: no file is left in it, and it is released however
    the process ends. Where the filesystem has no flock for a directory (NFS), there is no guard."""
    if directory is None:
        yield
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"{directory}: another batch is writing into this directory; wait for it to "
                              "end, or choose another -o") from None
        except OSError as e:
            log.debug(f"{directory}: no lock against a second batch here: {e.strerror or e}")
        yield
    finally:
        os.close(fd)
