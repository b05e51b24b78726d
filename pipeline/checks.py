"""The output check the engine makes before anything is written, and how foreign errors become ours."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
from pathlib import Path
from typing import Iterable

from .config import is_pipe_name, local_path, pipe_fd
from .errors import ConfigError, GPUError, OutputError, PipelineError


def as_pipeline_error(error: BaseException) -> BaseException:
    """Ours as it is; any CuPy error (at set-up or mid-run) as a GPUError with what the device had free; host
    memory running out (NumPy's or Python's MemoryError) as a GPUError too, as the CPU backend's own check
    before a run reports it (exit 5), not as a bug."""
    if isinstance(error, PipelineError):
        return error
    from .gpu.failures import cuda_error, is_cuda_error

    if is_cuda_error(error):  # CuPy's OutOfMemoryError is a MemoryError too
        return cuda_error(error)
    if isinstance(error, MemoryError):
        detail = " ".join(str(error).split()) or "an allocation failed"
        return GPUError(f"out of host memory: {detail}")
    return error


def check_output(source: str | None, target: Path | str, overwrite: bool, output_format: str | None = None) -> None:
    """Refuse, before decoding anything, an output that would destroy the input or cannot be written.

    A stream URL is the receiver's business: nothing to check here. ``source`` None: a command with no
    input (``pipeline sample``)."""
    if output_format == "fifo":  # through PyAV it writes nothing (an empty file, or a run that never ends)
        raise ConfigError(f"{target}: the fifo muxer (a queue in front of another muxer) is not supported; the "
                          "run queues its output itself: name the muxer behind it (-f matroska, mpegts, flv)")
    if output_format == "uncodedframecrc":  # it takes frames before encoding, which PyAV never hands a muxer
        raise ConfigError(f"{target}: the uncodedframecrc muxer takes frames before encoding, which are not given "
                          "to a muxer here; -f framecrc checksums the encoded frames")
    if isinstance(target, str):  # a stream URL or a pipe; but file:// writes a local file directly
        if pipe_fd(target, 1) is not None:
            check_single_file(target, output_format)
        local = local_path(target)
        if source is not None and local is not None and local.exists() and _is_input(local, source):
            raise ConfigError(f"{target}: output is the input; choose another -o")
        return
    from .outfile import final_path
    from .sequence import check_frames, check_single_picture, is_sequence

    check_name_length(target)
    check_single_file(target, output_format)
    final = final_path(target)  # a symbolic link's file: the temporary file is made beside it
    if final != target:
        check_name_length(final)
    if is_sequence(target, output_format):
        check_frames(source, target, overwrite, _is_input)
    else:
        check_single_picture(target, final, output_format)
        _check_replaced(source, target, overwrite)
    parent = final.parent if str(final.parent) else Path(".")
    linked = "" if final == target else f" (the link points to {final})"
    if not parent.is_dir():
        raise OutputError(f"{target}: {_not_a_directory(parent)}{linked}")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{target}: directory {parent} is not writable{linked}")


def _not_a_directory(parent: Path, option: str = "") -> str:
    """Why an output (``option``'s file, where given) cannot go into ``parent``: it is missing, or something
    else is at its name."""
    kind = special_kind(parent) or ("file" if parent.is_file() else None)
    if kind:
        return f"{option + ': ' if option else ''}{parent} is a {kind}, not a directory"
    return f"{option + ' ' if option else ''}directory {parent} does not exist"


# Muxers that write a playlist or manifest and segment files beside it, named from the output's: the output
# is written under a temporary name and renamed into place whole, which such a muxer's other files never are.
MULTI_FILE_MUXERS = ("hls", "dash", "segment", "ssegment", "stream_segment", "hds", "smoothstreaming",
                     "webm_chunk", "tee")
_MULTI_FILE_SUFFIXES = {".m3u8": "hls", ".mpd": "dash", ".ism": "smoothstreaming"}
# libavdevice's video outputs: they open a device (or a window), never a file put in place.
DEVICE_MUXERS = ("v4l2", "fbdev", "sdl", "sdl2", "xv", "opengl", "caca", "decklink")


def check_single_file(target: Path | str, output_format: str | None) -> None:
    """A local output is one file, a pipe (``target`` a str) one stream: refuse a muxer that writes several
    (a URL output is the receiver's), or a device's."""
    if output_format in DEVICE_MUXERS:
        raise ConfigError(f"{target}: -f {output_format} writes to a device, not a file or a stream; write a file, "
                          "a pipe (-o - -f FMT) or a URL")
    if isinstance(target, str):
        if output_format in MULTI_FILE_MUXERS:
            raise ConfigError(f"{target}: the {output_format} muxer writes several files, a pipe carries one "
                              "stream (-f mpegts or -f matroska do)")
        _check_writes_what_it_is_given(target, output_format)
        return
    muxer = output_format or _MULTI_FILE_SUFFIXES.get(target.suffix.lower())
    if muxer in MULTI_FILE_MUXERS:
        raise ConfigError(f"{target}: the {muxer} muxer writes several files; pipeline writes one file, put in "
                          "place whole (write .mp4, .mkv or .ts and segment it with ffmpeg, or stream to a URL)")
    if output_format != "image2":  # pictures: the sequence's staging names them (pipeline.sequence)
        _check_writes_what_it_is_given(target, output_format)


def _check_writes_what_it_is_given(target: Path | str, muxer: str | None) -> None:
    """A muxer that opens its output itself (a device, a network session) ignores the file or pipe it is
    given: it would open the temporary file's name, or "<none>" for a pipe."""
    from .muxers import opens_its_own_output

    if muxer is None or not opens_its_own_output(muxer):
        return
    if muxer == "image2":  # into a pipe (a local picture's files are named by its staging)
        raise ConfigError(f"{target}: the image2 muxer writes files by their names, a pipe carries one stream "
                          "(-f image2pipe does)")
    raise ConfigError(f"{target}: the {muxer} muxer opens its own output (a device or a network session), not "
                      "a file or a pipe; write a file, a pipe (-o - -f mpegts) or a URL")


def _check_replaced(source: str | None, target: Path, overwrite: bool) -> None:
    """The file a single output replaces: never the input, a directory or a special file; only with -y."""
    if source is not None and target.exists() and _is_input(target, source):
        raise ConfigError(f"{target}: output is the input; choose another -o")
    if target.exists() and target.is_dir():
        raise OutputError(f"{target}: is a directory")
    kind = special_kind(target)
    if kind is not None:  # replacing it would destroy a device node or a FIFO (-y on /dev/null as root)
        # only runs have a null output; a pipe is written as ffmpeg writes one, to "-" with a muxer named
        hint = " (-o - -f FMT writes into a pipe; -o null processes without writing)" if source is not None else ""
        raise OutputError(f"{target}: is a {kind}, not a regular file; only regular files are replaced{hint}")
    if target.exists() and not overwrite:
        raise ConfigError(f"{target}: already exists (use -y/--overwrite to replace it)")


def _is_input(target: Path, source: str) -> bool:
    src = local_path(source)  # a file:// URL and a file behind stdin are the input too
    # target.exists(): a link to a file not there yet (the run makes it) is not the input
    try:
        return src is not None and src.exists() and target.exists() and real_path(target).samefile(real_path(src))
    except OSError:  # a link into a directory that cannot be searched: not the input, as far as can be told
        return False


def check_stats_path(path: str | None, source: str = "", output: Path | str | None = None,
                     overwrite: bool = False) -> None:
    """The --stats-json file: see :func:`check_report_path`; it must not be the input or the output."""
    if path:
        check_report_path(path, "--stats-json", local_files(input=source, output=output) + _linked(output),
                          overwrite)
        _check_not_a_video_pipe(path, [output if isinstance(output, str) else None])


def check_streams_stats(path: str, streams: list[tuple[str, str | None]], overwrite: bool = False) -> None:
    """The --stats-json file of streams side by side: as :func:`check_stats_path`, for every stream's input
    and output."""
    theirs = []
    for source, output in streams:
        written = _written(output)
        theirs += local_files(input=source, output=written) + _linked(written)
    check_report_path(path, "--stats-json", theirs, overwrite)
    _check_not_a_video_pipe(path, [output for _, output in streams])


def _check_not_a_video_pipe(path: str, outputs: list[str | None]) -> None:
    """The report is not the pipe a stream writes its video into (/dev/stdout while ``-o -`` goes there)."""
    report = _node(lambda: os.stat(path))
    i = next((i for i, o in enumerate(outputs) if report is not None and report in _endpoints(o, 1)), None)
    if i is not None:
        whose = "the output" if len(outputs) == 1 else f"where stream {i + 1} writes its video"
        raise ConfigError(f"{path}: --stats-json is {whose}; choose another path")


def check_progress_path(path: str, source: str = "", output: Path | str | None = None,
                        stats_json: str | None = None, theirs: Iterable[tuple[Path, str]] = ()) -> None:
    """The ``-progress`` file, opened (and truncated) once the run is set up: see :func:`check_report_path`;
    an existing file is replaced without -y, as ffmpeg replaces it, but never the run's own files."""
    theirs = [*local_files(input=source, output=output, **{"--stats-json file": stats_json}), *_linked(output),
              *theirs]
    check_report_path(path, "-progress", theirs, overwrite=True, in_place=True)


def check_reads_kept(read: Iterable[tuple[Path, str]], outputs: Iterable[str | Path | None],
                     **reports: str | Path | None) -> None:
    """No file the run writes (its ``outputs``, its ``reports``: what each is -> its path) is one the run
    reads besides its input (``read``: the config file, a plugin, a filter's LUT), which -y would replace
    with what the run made."""
    from .sequence import is_frame_of

    written = [found for output in outputs for found in local_files(output=output)] + local_files(**reports)
    for path, option in written:
        for other, what in read:
            if _same_file(path, other):
                raise ConfigError(f"{path}: {option} is {what}; choose another path")
            if is_frame_of(other, path):  # an image sequence's frame, replaced with -y
                raise ConfigError(f"{path}: {option} would write {other}, {what}, as one of its frames; "
                                  "choose another path")


def _links_of(output: Path | str | None) -> list[Path]:
    """The files an image sequence's frames that are symbolic links write through to (none for another
    output, or where a link is refused: the output's own check says why)."""
    from .sequence import is_sequence, linked_frames

    if not isinstance(output, Path) or not is_sequence(output):
        return []
    try:
        return linked_frames(output)
    except OutputError:
        return []


def _linked(output: Path | str | None) -> list[tuple[Path, str]]:
    return [(file, f"a frame of {output} (through a link)") for file in _links_of(output)]


def local_files(**named: str | Path | None) -> list[tuple[Path, str]]:
    """(path, "the <name>") for each of ``named`` that is a file on this machine: a path, a ``file://``
    URL, the file a pipe reads (see :func:`pipeline.config.local_path`)."""
    found = [(local_path(value, dash=name == "input"), f"the {name}") for name, value in named.items()
             if isinstance(value, (str, Path))]
    return [(path, what) for path, what in found if path is not None]


def check_report_path(path: str, option: str, theirs: Iterable[tuple[Path, str]], overwrite: bool,
                      made_by_run: Path | None = None, in_place: bool = False) -> None:
    """A report (``option``'s file): refuse, before any work, a path that cannot be written, and one whose
    writing would destroy something: one of ``theirs`` (path, what it is to the user), or, without
    ``overwrite``, any existing file. A file is written beside itself and renamed into place, so its
    directory must take a new file (``in_place``: an existing file is opened and truncated instead, as
    ``-progress`` is); a FIFO or a device (``/dev/stdout``) is written into, nothing is replaced. Its
    directory may be ``made_by_run``, which the run creates (and refuses if it cannot)."""
    if is_pipe_name(path):  # ffmpeg's pipe names are -progress's; a report file named "-" helps no one
        raise ConfigError(f"{path}: {option} takes a path (/dev/stdout or /dev/stderr for those), not a pipe name")
    if path.endswith(("/", os.sep)):  # Path() would drop the "/": s.json/ would replace s.json
        raise OutputError(f"{path}: {option} names a directory (it ends with /); name the file")
    target = Path(path)
    check_name_length(target, option)
    from .sequence import is_frame_of

    for other, what in theirs:
        if _same_file(target, other):
            raise ConfigError(f"{target}: {option} is {what}; choose another path")
        if is_frame_of(target, other):
            raise ConfigError(f"{target}: {option} is one of the frames of {what}; choose another path")
    if open_fd(path) is not None:  # stdout redirected to a file: written into, where it points; never replaced
        return
    if _fd_named(path) is not None:  # /dev/fd/9 not open now: by the time of writing, it could be anything
        raise ConfigError(f"{target}: {option} names a file descriptor this process has not open for writing")
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise OutputError(f"{target}: {option} is a directory")
    if target.is_symlink() and _is_loop(target):
        raise OutputError(f"{target}: {option} is a symbolic link loop")
    if target.is_file() and not overwrite:
        raise ConfigError(f"{target}: {option} file already exists (use -y/--overwrite to replace it)")
    if target.is_file() and not os.access(target, os.W_OK):  # renamed over, it would be replaced all the same
        raise OutputError(f"{target}: {option} file is read-only; not replaced")
    if made_by_run is not None and _same_file(parent, made_by_run):
        return
    if not parent.is_dir():
        raise OutputError(f"{target}: {_not_a_directory(parent, option)}")
    if special_kind(target) is not None or (in_place and target.exists()):  # written into where it is
        return
    place = real_path(target).parent  # a link's file is written beside the file it points to
    if not os.access(place, os.W_OK):
        raise OutputError(f"{target}: {option} directory {place} is not writable")


_FD_NAME = re.compile(r"/(?:dev/fd|proc/self/fd)/(\d+)", re.ASCII)
_STD_NAMES = {"/dev/stdout": 1, "/dev/stderr": 2}


def open_fd(path: str | Path) -> int | None:
    """The descriptor of this process that ``path`` names (``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``,
    ``/proc/self/fd/N``) where it is open for writing: a report is written into it, as a shell's ``>`` set
    it up, never replaced by a new file; None for any other path."""
    fd = _fd_named(path)
    try:
        return fd if fd is not None and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY else None
    except OSError:
        return None


def report_on_stdout(path: str | Path | None) -> bool:
    """Whether a report (``--stats-json``, ``--json``) goes to this process's stdout: the summary then goes to
    stderr, as with ``-o -``, so that stdout holds the JSON alone."""
    return path is not None and open_fd(path) == 1


def _fd_named(path: str | Path) -> int | None:
    text = os.fspath(path)
    match = _FD_NAME.fullmatch(text)
    return _STD_NAMES.get(text, int(match.group(1)) if match and len(match.group(1)) < 10 else None)


def _same_file(a: Path, b: Path) -> bool:
    """The same file: one inode (links included), or the same place once resolved (b not written yet)."""
    try:
        if a.exists() and b.exists():
            return a.samefile(b)
        return real_path(a) == real_path(b)
    except OSError:
        return False


def _is_loop(path: Path) -> bool:
    try:
        path.stat()
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


def real_path(path: Path | str) -> Path:
    """``path`` with its links followed, as ``Path.resolve()`` gives it, except that a symbolic link loop
    is left as it is instead of raising RuntimeError (Python 3.11-3.12): whatever opens it then fails with
    ELOOP, an OSError every caller reports."""
    return Path(os.path.realpath(path))


_SPECIAL = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
            (stat.S_ISSOCK, "socket"))


def special_kind(path: Path | str, dir_fd: int | None = None) -> str | None:
    """What ``path`` (in ``dir_fd``, if given) is when it exists and is neither a regular file nor a
    directory (symlinks followed)."""
    try:
        mode = os.stat(path, dir_fd=dir_fd).st_mode
    except (OSError, ValueError):
        return None
    return next((name for test, name in _SPECIAL if test(mode)), None)


def check_reachable(path: Path, what: str, error: type[PipelineError] = OutputError) -> None:
    """Refuse, in one line, a path whose place cannot even be looked at: a directory on the way that the
    user cannot enter (EACCES) or a path past the system's length limit (ENAMETOOLONG). pathlib's
    ``exists()``, ``is_dir()`` and ``is_symlink()`` raise these instead of answering."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError, ValueError):  # ValueError: a NUL, refused by the caller
        return
    except OSError as e:
        if e.errno != errno.ELOOP:  # a link loop on the way: each caller names it
            raise error(f"{path}: {what}: {e.strerror or e}") from None


def check_name_length(target: Path, what: str = "output") -> None:
    """A name longer than the filesystem takes is an output error, not an OSError from deep inside; so is
    a place that cannot be looked at (:func:`check_reachable`)."""
    from .outfile import name_max

    parent = target.parent if str(target.parent) else Path(".")
    limit, length = name_max(parent), len(os.fsencode(target.name))
    if length > limit:
        raise OutputError(f"{target}: {what} file name too long ({length} bytes; this filesystem takes {limit})")
    check_reachable(target, what)


def _written(output: str | None) -> Path | None:
    """The local file an output writes: a path, a ``file://`` URL, or the file behind ``-``/``pipe:N`` (stdout
    redirected to a file); None for null, a stream URL or a pipe."""
    if output in (None, "null"):
        return None
    fd = pipe_fd(output, 1)
    return local_path(f"pipe:{fd}") if fd is not None else local_path(output, dash=False)


def _endpoints(name: str | None, fd_default: int) -> set[tuple]:
    """What a stream reads or writes that no other stream may share: its file descriptor (stdin, stdout),
    and a pipe, FIFO, socket or terminal by identity, however it is named (``-``, ``/dev/stdin``, a FIFO's
    path). A regular file is for the file checks; the null device is shared harmlessly."""
    if name in (None, "null"):
        return set()
    fd = pipe_fd(name, fd_default)
    path = local_path(name, dash=False) if fd is None else None
    node = _node(lambda: os.fstat(fd)) if fd is not None else _node(lambda: os.stat(path)) if path else None
    return {key for key in (("fd", fd) if fd is not None else None, node) if key is not None}


def _node(stat_of) -> tuple | None:
    """("node", device, inode) of a pipe, FIFO, socket or terminal; None for a regular file, a directory,
    the null device, or what cannot be seen."""
    try:
        st = stat_of()
        if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or os.path.samestat(st, os.stat(os.devnull)):
            return None
    except (OSError, ValueError):
        return None
    return ("node", st.st_dev, st.st_ino)


def _check_pipes(names: list[str | None], fd_default: int, verb: str) -> None:
    """Two streams on one pipe would each get part of its bytes."""
    seen: dict[tuple, int] = {}
    for i, name in enumerate(names):
        for key in _endpoints(name, fd_default):
            if key in seen:
                fds = {pipe_fd(n, fd_default) for n in (names[seen[key]], name)} - {None}
                what = {0: "stdin", 1: "stdout"}.get(min(fds, default=-1), f"the same pipe ({name})")
                raise ConfigError(f"streams {seen[key] + 1} and {i + 1} both {verb} {what}; "
                                  f"one stream at most may {verb} a pipe")
            seen[key] = i


def check_streams(streams: list[tuple[str, str | None]]) -> None:
    """Streams side by side (``pipeline run IN1 IN2 ...``, ``[[streams]]``), as (input, output) pairs:
    before any starts, no stream writes what another reads (its input, or a frame linked to it) or writes,
    and no two read one pipe (stdin) or write one."""
    from .sequence import is_frame_of, overlaps

    _check_pipes([source for source, _ in streams], 0, "read")
    _check_pipes([output for _, output in streams], 1, "write")

    def writes(output: str | None) -> list[Path]:
        path = _written(output)
        return [] if path is None else [path, *_links_of(path)]

    written = [writes(output) for _, output in streams]
    read = [local_path(source) for source, _ in streams]
    for i, (_, output) in enumerate(streams):
        for j, ((source, _), src) in enumerate(zip(streams, read)):
            if i == j:
                continue
            for path in written[i]:
                if src is not None and (_same_file(path, src) or is_frame_of(src, path)):
                    raise ConfigError(f"{output}: the output of stream {i + 1} is the input of stream {j + 1} "
                                      f"({source}); choose another output")
                if i < j and any(_same_file(path, theirs) or overlaps(path, theirs) for theirs in written[j]):
                    raise ConfigError(f"{output}: streams {i + 1} and {j + 1} write the same file; choose "
                                      "another output")
