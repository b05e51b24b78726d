"""FFmpeg's habits on ``pipeline run``, so that fingers used to ffmpeg work: ``-i IN``, the output as a
positional after the input, ``-n``, ``-ss``/``-t``/``-to`` in FFmpeg's time syntax and ``-progress``.
The one-word aliases of existing options (``-vf``, ``-c:v``, ``-f``, ``-v``/``-loglevel``) are declared
beside their long options in :mod:`pipeline.cli`; the long options stay.
"""

from __future__ import annotations

import argparse
import os
import re
from decimal import Decimal

from .config import file_url_as_path, is_url
from .errors import ConfigError

_CLOCK = re.compile(r"^(?:(\d+):)?(\d{1,2}):(\d{1,2}(?:\.\d*)?)$", re.ASCII)  # ASCII: \d is [0-9]
_SECONDS = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(s|ms|us)?$", re.ASCII)
_UNITS = {None: Decimal(1), "s": Decimal(1), "ms": Decimal("0.001"), "us": Decimal("0.000001")}


def parse_time(text: str) -> float:
    """FFmpeg's duration syntax, in seconds: ``[HH:]MM:SS[.m...]`` (``01:30``, ``0:01:30.5``) or a number
    of seconds with an optional unit (``90``, ``1.5``, ``1500ms``, ``250us``)."""
    value = text.strip()
    clock = _CLOCK.match(value)
    if clock is not None:
        hours, minutes, seconds = clock.groups()
        if int(minutes) < 60 and Decimal(seconds) < 60:
            return float(int(hours or 0) * 3600 + int(minutes) * 60 + Decimal(seconds))
    plain = _SECONDS.match(value)
    if plain is not None:
        return float(Decimal(plain.group(1)) * _UNITS[plain.group(2)])
    raise argparse.ArgumentTypeError(f"invalid time {text!r}: seconds (12.5, 1500ms) or [HH:]MM:SS[.m] "
                                     "(01:30, 0:01:30.5)")


def path_name(text: str) -> str:
    """A file (or encoder, format, filter) name given on the command line: never empty (``-o "$OUT"`` with
    OUT unset would otherwise quietly mean the default, or nothing)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty name (an unset shell variable?)")
    return text


def file_name(text: str) -> str:
    """A file named on the command line (a report, a plugin, a batch's input or folder): as :func:`path_name`,
    and a ``file://`` URL of this machine is its path, as it is for a run's input and output."""
    try:
        return file_url_as_path(path_name(text))
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def config_name(text: str) -> str:
    """--config's value, as :func:`file_name`; ``file:NAME`` is a file even without a '/' (NAME alone would
    be the preset of that name)."""
    name = file_name(text)
    return f"./{name}" if text.startswith("file:") and "/" not in name else name


# ffmpeg's options that have no spelling of their own here. argparse would read ``-crf 20`` as ``-c rf`` and take
# the 20 for the output (``-c:a aac`` likewise): each is named with what does the same here.
# (A stream specifier is dropped: -crf:v 20 is -crf 20.)
_ENCODER_OPTIONS = {"-crf": "crf", "-cq": "cq", "-preset": "preset", "-tune": "tune", "-profile": "profile",
                    "-level": "level", "-g": "g", "-bf": "bf", "-b": "b", "-maxrate": "maxrate", "-bufsize": "bufsize",
                    "-qp": "qp", "-qmin": "qmin", "-qmax": "qmax", "-rc": "rc", "-cpu-used": "cpu-used",
                    "-deadline": "deadline", "-x264-params": "x264-params", "-x265-params": "x265-params"}
_AUDIO_OPTIONS = ("-c:a", "-acodec", "-codec:a", "-b:a")
_MUXER_OPTIONS = ("-movflags", "-brand", "-hls_time", "-hls_list_size", "-segment_time", "-muxdelay",
                  "-muxpreload", "-write_tmcd", "-use_editlist", "-frag_duration", "-min_frag_duration")


# ffmpeg's options that change nothing here: scripts written for ffmpeg keep them. A run prints no banner, reads
# no commands from stdin, and writes no subtitle or data streams (a notice names those left out).
_NO_OPS = ("-hide_banner", "-nostdin", "-sn", "-dn")
# ffmpeg's options with no meaning or no spelling here, and what to give instead. argparse would read -threads 4
# as -t hreads and -s as -ss.
_INSTEAD = {
    "-r": "the output keeps the input's frame timing; there is no -r", "-s": "-vf scale=W:H sets the size",
    "-threads": "--encoder-opt threads=N sets the encoder's threads", "-vn": "a run processes the video",
    "-map": "a run takes the input's first video stream and its audio (-an: none); there is no -map",
    "-filter_complex": "-vf takes one chain of filters", "-lavfi": "-vf takes one chain of filters",
    "-hwaccel": "--decode nvdec decodes on the GPU", "-af": "the audio is copied or encoded, never filtered",
    "-timeout": "--timeout SECONDS", "-stream_loop": "an input is read once",
}
# More of ffmpeg's options, refused whole: each would otherwise be read as an option here with a value glued on
# (-itsoffset 2 as -i tsoffset, -fflags +genpts as -f flags).
_FFMPEG_OTHERS = frozenset((
    "-itsoffset", "-fflags", "-flags", "-vsync", "-fps_mode", "-aspect", "-metadata", "-ignore_unknown", "-copyts",
    "-start_at_zero", "-loop", "-vtag", "-tag", "-disposition", "-autorotate", "-noautorotate", "-shortest",
    "-report", "-benchmark", "-xerror", "-filter_threads", "-hwaccel_device", "-hwaccel_output_format",
    "-init_hw_device", "-vstats", "-max_muxing_queue_size", "-probesize", "-analyzeduration", "-ac", "-ar",
    "-vol", "-strict", "-fs", "-dts_delta_threshold", "-top", "-field_order", "-color_range", "-colorspace",
    "-color_primaries", "-color_trc", "-sws_flags", "-passlogfile", "-pass", "-vbsf", "-bsf", "-bsf:v", "-bsf:a",
    "-filter:a", "-frames:a", "-force_key_frames", "-framerate", "-fpsmax", "-filter_script", "-itsscale", "-isync",
    "-ignore_editlist", "-timecode", "-target", "-video_size", "-vstats_file", "-aframes",
))


def check_ffmpeg_only_options(args: list[str], known: dict[str, argparse.Action]) -> list[str]:
    """``args`` without ffmpeg's options that change nothing here; ConfigError (exit 2) for any other option
    the parser (``known``: its option strings) lacks, saying how it is given here where there is a way.

    argparse would otherwise take an unknown single-dash word apart: ``-nostdin`` as ``-n -o stdin`` (the
    output written to a file named "stdin"), ``-hide_banner`` as ``-h`` (the help, exit 0, nothing run),
    ``-crf 20`` as ``-c rf`` with 20 for the output. The forms argparse gives a known option stay:
    ``-o=out.mp4``, ``-oout.mp4``, ``-yq``, ``-yo out.mp4``."""
    kept: list[str] = []
    for i, token in enumerate(args):
        if token == "--":  # names follow
            return kept + args[i:]
        if token in _NO_OPS and not _takes_value(kept[-1] if kept else None, known):  # -o -sn: argparse refuses
            continue
        kept.append(token)
        if _is_foreign(token, known):
            following = args[i + 1] if i + 1 < len(args) else None
            raise ConfigError(_instead_of(token, following, known))
    return kept


def _takes_value(word: str | None, known: dict[str, argparse.Action]) -> bool:
    action = known.get(word or "")
    return action is not None and action.nargs != 0


def _is_foreign(token: str, known: dict[str, argparse.Action]) -> bool:
    """Whether ``token`` is an option word this parser does not have."""
    if token in known or token[:1] != "-" or not token[1:2].isalpha() or token.startswith("--"):
        return False
    if " " in token:  # argparse reads "-o x.mp4" as -o " x.mp4": a name starting with '-' follows -- or ./
        return True
    bare = token.split(":")[0]
    if bare in _ENCODER_OPTIONS or bare in _MUXER_OPTIONS or bare in _INSTEAD or token in _AUDIO_OPTIONS \
            or bare in _FFMPEG_OTHERS or token.startswith("-c") or _long_spelling(token, known):
        return True  # -cfoo: never an encoder named foo; -output: never -o utput
    if token.split("=", 1)[0] in known:  # -vf=hflip
        return False
    return not _short_options(token[1:], known)


def _short_options(letters: str, known: dict[str, argparse.Action]) -> bool:
    """Whether ``letters`` are one-letter options run together as argparse takes them: flags (``-yq``), then
    at most one that takes a value, given glued on when it comes first (``-oout.mp4``) or in the next word when
    it comes last (``-yo out.mp4``). Flags then a value glued on is refused: ``-nostdin`` is no ``-n -o stdin``."""
    for index, letter in enumerate(letters):
        if f"-{letter}" not in known:
            return False
        if _takes_value(f"-{letter}", known):
            return index in (0, len(letters) - 1)
    return True


def _long_spelling(token: str, known: dict[str, argparse.Action]) -> str | None:
    """The parser's long option that ``token`` starts with, given one dash (``-output``, ``-output.mp4``,
    ``-input_format``), if any: a mistyped option, never a one-letter one with a value glued on."""
    word = token[1:].replace("_", "-")
    names = [name for name in known if name.startswith("--") and word.startswith(name[2:])]
    return max(names, key=len, default=None)


def _instead_of(token: str, following: str | None, known: dict[str, argparse.Action]) -> str:
    """The refusal of ``token``. ffmpeg's encoder, muxer and audio options have a spelling where the command
    encodes (run, batch)."""
    if " " in token:
        return f"{token}: not an option here; a name that starts with '-' goes after -- (or as ./{token})"
    if (name := _long_spelling(token, known)) is not None:
        return f"{token}: not an option here; {name} (two dashes) is"
    hints = "--encoder-opt" in known
    bare = token.split(":")[0]  # a stream specifier is dropped: -crf:v 20 is -crf 20
    given = following if following is not None and not following.startswith("-") else "VALUE"
    if hints and token in _AUDIO_OPTIONS:
        return (f"{token}: the audio is copied where the container takes its codec, else encoded to the "
                "container's usual one at its default rate; --audio copy|encode|none chooses (-an: none)")
    if hints and bare in _ENCODER_OPTIONS:
        return (f"{token}: encoder options are given as --encoder-opt KEY=VALUE: "
                f"--encoder-opt {_ENCODER_OPTIONS[bare]}={given}")
    if hints and bare in _MUXER_OPTIONS:
        return f"{token}: muxer options are given as --output-opt KEY=VALUE: --output-opt {bare[1:]}={given}"
    if hints and bare in _INSTEAD:
        return f"{token}: {_INSTEAD[bare]}"
    if hints and token.startswith("-c"):
        return (f"{token}: not an option here; -c names the encoder (-c libx264), --encoder-opt KEY=VALUE gives it "
                "an option")
    return f"{token}: not an option here; --help lists them"


def text_value(text: str) -> str:
    """A name or value FFmpeg takes as text (an encoder, a muxer, an option's value): never empty, and UTF-8.
    Bytes that are not (the shell's ``$'\\xff'``) reached FFmpeg as an encoding error naming no option."""
    path_name(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"{repr(os.fsencode(text))[1:]} is not UTF-8 text") from None
    return text


def add_overwrite_arguments(p) -> None:
    """``-y`` replaces an existing output, ``-n`` never does (exit 2, as without either): one or the other."""
    group = p.add_mutually_exclusive_group()
    group.add_argument("-y", "--overwrite", action="store_true", default=None, help="replace an existing output file")
    group.add_argument("-n", "--no-overwrite", dest="overwrite", action="store_false", default=None,
                       help="never replace an existing output: exit 2 if it exists (the default without -y)")


def add_ffmpeg_arguments(p) -> None:
    """``-i``, the span of the input and ``-progress``."""
    p.add_argument("-i", dest="input", action="append", metavar="INPUT", type=path_name,
                   help="the input, as an option (ffmpeg style): then a positional is the output")
    span = p.add_argument_group("span of the input (ffmpeg's time syntax: seconds, or [HH:]MM:SS[.m])")
    span.add_argument("-ss", "--start", type=parse_time, metavar="TIME",
                      help="start at this time of the input (counted from its start): decoding begins at the "
                           "keyframe before and frames before TIME are dropped; output timestamps start at 0")
    ends = span.add_mutually_exclusive_group()
    ends.add_argument("-t", "--duration", type=parse_time, metavar="TIME", help="stop after this much of the input")
    ends.add_argument("-to", "--end", type=parse_time, metavar="TIME",
                      help="stop at this time of the input (counted from its start, as -ss)")
    p.add_argument("-progress", dest="progress", metavar="URL", type=file_name,
                   help="write ffmpeg's key=value progress blocks (about once a second, and at the end) to a "
                        "file, or to pipe:1 (stdout) or pipe:2 (stderr)")


def is_output_dir(output: str | None) -> bool:
    """``-o DIR/`` (or an existing directory) or ``-o null``: the outputs of several inputs."""
    if output is None or (is_url(output) and output[:5].lower() != "file:"):  # udp://host:port/ is a stream
        return False
    output = file_url_as_path(output)
    return output == "null" or output.endswith(("/", os.sep)) or os.path.isdir(output)


def resolve_paths(args: argparse.Namespace, configured_output: str | None = None) -> None:
    """The input is ``-i IN`` or the first positional; a positional after it is the output (as ``-o``).

    With ``-o DIR/`` or ``-o null`` (or, without -o, a config's ``output`` of that kind) every positional
    and every ``-i`` is an input: ``args.inputs`` lists them (several streams in one process, see
    :mod:`pipeline.many`). The config's folder never lets the second input be taken for an output, which
    -y would replace."""
    given = list(getattr(args, "paths", None) or ())
    inputs = list(args.input) if isinstance(args.input, list) else [args.input] if args.input else []
    args.inputs = None
    output = args.output if args.output is not None else configured_output
    if is_output_dir(output) and len(inputs) + len(given) > 1:
        args.inputs = inputs + given
        args.input, args.paths = args.inputs[0], None
        return
    if len(inputs) > 1:
        raise ConfigError(f"run: one input only; -i was given {len(inputs)} times")
    if not inputs:
        if not given:
            raise ConfigError("run: an input is needed: pipeline run IN [OUT], or pipeline run -i IN [OUT]")
        inputs.append(given.pop(0))
    several = "; several inputs need -o DIR/ (an existing directory) or -o null"
    if len(given) > 1:
        raise ConfigError(f"run: one input and one output; got {' '.join([*inputs, *given])}{several}")
    if given and args.output is not None:
        raise ConfigError(f"run: two outputs: {given[0]} and -o {args.output}{several}")
    args.input = inputs[0]
    if given:
        args.output = given[0]
    args.paths = None
