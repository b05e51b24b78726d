"""The command line's parser: every command, option and help text (``pipeline --help``, ``pipeline
COMMAND --help``), and the argument types that check a value as it is parsed.

Apart from :mod:`pipeline.cli`, which runs the commands: it is most of the command line's text, and it
changes with the options, not with what a command does. ``pipeline batch`` takes the run options
(:func:`add_run_arguments`) from here too.
"""

from __future__ import annotations

import argparse
import errno
import sys
from fractions import Fraction

from . import __version__
from .config import (AUDIO_MODES, DECODERS, DROP_POLICIES, MAX_ARENA_HEADROOM, MAX_IN_FLIGHT, MAX_RING_SIZE,
                     MAX_NVDEC_SESSIONS, MAX_STREAMS, RunConfig, check_device)
from .config_file import preset_names
from .errors import ConfigError
from .ffmpeg_args import (add_ffmpeg_arguments, add_overwrite_arguments, check_ffmpeg_only_options, config_name,
                          file_name, path_name, text_value)
from .log import LEVELS
from .numbers import integer, number
from .memory.registry import STRATEGIES

EXIT_CODES = """exit codes:
  0    success
  2    usage or config error (bad option, filter chain, config key, a NaN or infinite number or
       one outside its range; an encoder or muxer option nobody uses; an encoder that refuses the
       frames or whose hardware is absent, a container that cannot hold them; a config or LUT file
       that is not regular or too large, a config nested too deeply; output or --stats-json file
       exists without -y (or with -n), or appeared during the run; --preview where no window can
       be shown; a --plugin file that fails to load; a URL whose protocol the installed FFmpeg
       lacks, e.g. srt:// with PyAV's wheel; a pipe output without -f; -ss past the input's end; a
       --pix-fmt FFmpeg does not know or the encoder does not take)
  3    bad input (missing, unreadable, no video stream, a still image, undecodable, frames too large;
       with --strict, any decode error or a damaged or cut-short input; a live source, FIFO or
       device that cannot be opened within --timeout, or that stalled and could not be reopened:
       then the frames done before the stall are kept, playable)
  4    output or I/O error (directory missing or not writable, write failed, disk full, a name too
       long for the filesystem; the output is a FIFO or a device: only regular files are replaced;
       stdout cannot be written)
  5    GPU or device memory error (no usable GPU with --device cuda, out of device memory, CUDA error,
       at set-up or mid-run, with what was needed and what was free; on the CPU backend, frames
       whose buffers exceed the available memory)
  129  hung up (SIGHUP, the terminal closed): in-flight frames drained, output finalised (during
       set-up: at once, nothing written)
  130  interrupted (SIGINT): likewise
  143  terminated (SIGTERM): likewise
  1    internal error (a bug; --debug shows the traceback); a --plugin filter failing mid-run
       (the line names the filter and its file)"""


RUN_NOTES = """Process a video file: decode, filter on the GPU (or the CPU), encode; audio is copied (or
encoded where the container cannot take its codec; see --audio).

  Output: written to a hidden temporary file beside the target and renamed into place when complete,
    so the target never holds a partial file; an existing target is replaced only with -y, and
    without -y neither is one that another process created during the run (exit 2). A symbolic link
    stays a link: the file it points to is replaced (a dangling link's file is created).
  Names: one without scheme:// is a local file whatever it holds ("meeting12:30.mp4" is no
    protocol), except file:PATH, FFmpeg's file protocol, which is PATH (./file:x names file:x); a
    long output name gets a shortened temporary name.
  Input: 8-bit 4:2:0 is read as it is, deeper 4:2:0 as 10 bits (12 bits and more rounded to 10), RGB
    and grey as RGB; other formats (4:4:4, NV12, 10-bit 4:2:2, ...) are converted to the nearest with a
    notice, an odd last row/column is dropped, a mid-stream size change is scaled to the first size.
  Colour: processed with the input's own matrix (BT.601, BT.709 or BT.2020, from its tags; untagged HD
    is BT.709) and range, and the output carries the input's tags; RGB and grey input is written as
    YUV with BT.709 (HD) or BT.601 (SD), limited range, tagged so (a notice says which).
  Bit depth: 10-bit input gives 10-bit output where the encoder takes it (libx264 High 10, libx265,
    libsvtav1, ffv1), else 8 bits with a notice; --pix-fmt chooses. HDR metadata (mastering display,
    content light level) is written through libx265/libx264/libsvtav1's params, merged with yours;
    other encoders cannot carry it (a notice says so).
    Timestamps are kept (variable frame rate included); one missing, going backwards or jumping by
    over a minute (damage, a wrap) is moved so that they keep increasing.
  Streams: the first video stream is processed (a notice names it and the others, not copied);
    interlaced video is processed and written as progressive frames, with a notice.
  Rotation: kept, not applied. Pixels are processed as stored and the output carries the input's
    rotation (display matrix), so players show it turned as they showed the input. Geometry filters
    (crop, flips, transpose) therefore work on the picture as stored, before that rotation.
  Damaged input: undecodable packets are skipped and counted, a truncated file gives the frames it
    holds with a warning (in every container: what the demuxer met on the way is reported); errors
    the decoder concealed are counted as corrupt frames; --strict makes the first decode error, or
    a damaged or cut-short input, fatal (exit 3), and decodes with slice threads.
  SIGINT/SIGTERM/SIGHUP: stop reading, finish the frames in flight, finalise the output; a second one
    exits at once without output, as SIGQUIT does. During set-up (before the output exists) the first
    one ends the run at once. SIGHUP or SIGINT ignored when the run starts (nohup, cmd &) stays ignored.
    Files read while setting up (--config, lut3d) must be regular files, of bounded size.

FFmpeg's spellings: -i IN (then a positional is the output), -vf, -c:v, -f, -n, -v/-loglevel, -frames:v,
  -re, -nostats; -hide_banner, -nostdin, -sn and -dn change nothing. ffmpeg's options that have
  another spelling here (-crf 20: --encoder-opt crf=20) or none are exit 2, saying so.
  Spans: -ss/-t/-to take seconds or [HH:]MM:SS[.m], counted from the input's start; frame-accurate
    (decoding starts at the keyframe before -ss, earlier frames are dropped). With -ss the output's
    timestamps start at 0 there, as ffmpeg -ss before -i; audio is cut to the packet.
  Pipes: - (or pipe:) is stdin as the input, stdout as the output (needs -f): written directly, and
    the summary goes to stderr. MP4/MOV on a pipe are written fragmented. stdin is read as fast as it
    comes (no drops, no seeking, no frame count).
  -progress FILE|pipe:1|pipe:2: ffmpeg's key=value progress blocks, about once a second and at the end.
    The file is replaced once the run's checks pass; the input, the output or --stats-json is refused.

Real time:
  Live input: any URL FFmpeg opens (rtsp://, udp://, tcp://, srt://, http(s):// HLS...) or a capture
    device (--input-format v4l2 /dev/video0); a local FIFO or character device too (waiting for a
    writer is bounded by --timeout; add --drop-policy block to keep every frame). Opening and every read are bounded by --timeout; a source
    silent that long (or whose video stops while audio flows) is stalled: with --reconnect N it is
    reopened up to N times per outage (back-off 0.5, 1, 2, 4, 8 s), then the run ends with exit 3 and
    the frames done kept. The end of a stream (the sender closed it) ends the run normally. A URL
    input is treated as live even when it is a file on a server: add --drop-policy block for those.
  Output URL (udp://, tcp://, srt://, rtmp://): written directly, no temporary file; the muxer is
    --format, else MPEG-TS (FLV for rtmp). --config realtime sets low-latency libx264.
  --realtime: a file is read at its own frame rate, as a camera would deliver it.
  Drops: live and paced sources cannot wait, so when processing falls behind a frame is dropped
    (drop-oldest: the one waiting longest; drop-newest: the arriving one) and counted per stage;
    every queue is bounded, memory never grows. Default: block for files, drop-oldest otherwise.
  Latency: per frame, host times at decoded, slotted (in a host slot), uploaded, filtered, downloaded
    (GPU: CUDA event completions on the host clock), handed to the encoder, packet out; the summary
    gives p50/p95/p99/max of each hop, --stats-json the per-frame series."""


DESCRIPTION = """Run a video through GPU filters, from the command line as with ffmpeg: a file, a live stream
(rtsp, udp, srt, ...) or a capture device is decoded, filtered on an NVIDIA GPU (blur, sharpen,
denoise, colour grading with 3D LUTs, scaling, edges, ...; on the CPU where there is no GPU) and
encoded, with its audio copied. Presets and your own filters plug in. It also measures: how fast,
how much latency, and what the GPU memory strategy costs (pooled buffers against per-frame
allocations) on your own GPU and videos."""


EXAMPLES = """examples:
  pipeline run in.mp4 -o out.mp4 --filters "gblur=sigma=2,eq=contrast=1.2"
  pipeline run -i in.mp4 -vf hflip -ss 5 -t 10 out.mp4   the same spellings as ffmpeg
  pipeline run in.mp4 --config denoise              a preset: 'pipeline presets' lists them
  pipeline run rtsp://cam.local/stream -o cam.mkv --reconnect 3
  pipeline filters gblur                            what a filter does and takes
  pipeline sample 1080p                             a test clip: samples/bench_1080p.mp4
  pipeline bench samples/bench_1080p.mp4            memory strategies side by side (GPU)

'pipeline COMMAND --help' describes a command and all of its options.
"""


class _Parser(argparse.ArgumentParser):
    intermixed = False  # `run`: its positionals (input, output) anywhere among the options, as ffmpeg takes them

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        if self._subparsers is None:  # a command's own parser: every word of the command line is its
            args = check_ffmpeg_only_options(args, self._option_string_actions)
        if not self.intermixed:
            return super().parse_known_args(args, namespace)
        # argparse's intermixed parsing loses what follows "--" (names that start with "-"): taken here.
        tail = args[args.index("--") + 1:] if "--" in args else []
        args = args[:len(args) - len(tail) - 1] if "--" in args else args
        self.intermixed = False  # parse_known_intermixed_args calls back into this method
        try:
            namespace, extras = self.parse_known_intermixed_args(args, namespace)
        finally:
            self.intermixed = True
        if tail:
            namespace.paths = [*(namespace.paths or []), *tail]
        return namespace, extras

    def _print_message(self, message: str, file=None) -> None:
        """argparse drops write errors; on stdout (``--help``, ``--version``) they are the command's output
        failing, an OSError for the CLI (exit 4), not a silent success."""
        if message and file is None:  # meant for sys.stdout, None when the process started with it closed
            raise OSError(errno.EBADF, "it is closed")
        if message and file is sys.stdout:
            file.write(message)
            file.flush()
            return
        super()._print_message(message, file)

    def error(self, message: str):  # one line and the documented code, as for every other error
        prog = self.prog.removeprefix("pipeline").strip()  # "pipeline: error:" is printed already
        raise ConfigError(f"{prog}: {message}" if prog else message)


class _Once(argparse.Action):
    """An option given at most once: a second one replaced the first without a word (--config denoise
    --config sharpen ran sharpen alone; presets do not chain)."""

    def __call__(self, parser, namespace, values, option_string=None):
        earlier = getattr(namespace, self.dest, None)
        if earlier is not None and earlier != values:
            raise ConfigError(f"{option_string} given twice ({earlier}, {values}): give it once")
        setattr(namespace, self.dest, values)


def _device(text: str) -> str:
    try:
        check_device(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _kv(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    if value:
        text_value(value)
    return text_value(key), value


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command with its options; with ``command``, only that one's options are built (the others are
    listed by name): `pipeline run` then does not import the bench, probe and batch modules to parse."""
    parser = _Parser(prog="pipeline", description=DESCRIPTION, epilog=EXAMPLES + "\n" + EXIT_CODES,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"pipeline {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")
    for name, (help_text, add_options) in _COMMANDS.items():
        if command in (None, name):
            add_options(sub, name, help_text)
        else:
            sub.add_parser(name, help=help_text)
    for command_parser in sub.choices.values():  # an internal error's line names it, whichever the command
        if "--debug" not in command_parser._option_string_actions:
            command_parser.add_argument("--debug", action="store_true", default=None, help="show tracebacks")
    return parser


def command_of(argv: list[str]) -> str | None:
    """The command named first on the command line, if it is one (the parser checks the rest)."""
    return argv[0] if argv and argv[0] in COMMANDS else None


def add_run_arguments(p: argparse.ArgumentParser, d: RunConfig, single: bool = True) -> None:
    """Every flag defaults to None so that only the flags given override the config file.

    ``single=False``: without the input, the output and the span options (``pipeline batch`` has its own)."""
    if single:
        p.add_argument("paths", nargs="*", metavar="INPUT [OUTPUT]", type=path_name,
                       help="input video file, stream URL, capture device or - (stdin); then, optionally, the "
                            "output (as -o). Several inputs with -o DIR/ or -o null run side by side in this "
                            "process, sharing the GPU's memory (also: [[streams]] in a --config file)")
        p.add_argument("-o", "--output", type=path_name,
                       help="output file, stream URL or - (stdout, with -f) (default: <input stem>_processed<ext> in "
                            "the current directory; a URL input needs -o); an existing directory (DIR/: each input "
                            "writes DIR/<stem>_processed<ext>, one or several); null: no output")
    add_overwrite_arguments(p)
    if single:
        add_ffmpeg_arguments(p)
    p.add_argument("-vf", "-filter:v", "--filters",
                   help=f"filter chain, ffmpeg syntax (default: {d.filters!r}; '' for none)")
    p.add_argument("--config", metavar="PRESET|FILE", type=config_name, action=_Once,
                   help=f"a preset by name ({', '.join(preset_names())}: see 'pipeline presets') or a TOML file "
                        "(a path with a '/' or ending in .toml); flags given here override it")
    p.add_argument("--device", type=_device, metavar="auto|cuda|cuda:N|cpu",
                   help=f"where the kernels run: auto (CUDA if there is a GPU), cuda, cuda:N (that GPU), cpu "
                        f"(default: {d.device})")
    p.add_argument("--decode", choices=DECODERS,
                   help=f"decoder: cpu (PyAV, into the pinned ring), nvdec (the GPU's decoder, frames stay in device "
                        f"memory) or auto (nvdec when it takes the stream, else cpu) (default: {d.decode})")
    p.add_argument("--nvdec-sessions", type=integer, metavar="N",
                   help=f"with --decode nvdec, NVDEC sessions decoding a file's GOPs side by side, 1 to "
                        f"{MAX_NVDEC_SESSIONS}; a live or paced input and --strict use one (default: {d.nvdec_sessions})")
    p.add_argument("--alloc", choices=tuple(STRATEGIES), help=f"memory allocation strategy (default: {d.alloc})")
    p.add_argument("--naive-alloc", dest="alloc", action="store_const", const="naive",
                   help="per-frame cudaMalloc/cudaFree and pageable host memory (same as --alloc naive)")
    p.add_argument("-c", "-c:v", "-vcodec", "-codec:v", "--codec", type=text_value,
                   help=f"video encoder, any PyAV has (default: {d.codec}, or the container's own where it takes no "
                        "H.264: libvpx-vp9 for .webm); one that cannot take the frames exits 2 saying why")
    p.add_argument("-pix_fmt", "--pix-fmt", dest="pix_fmt", metavar="FORMAT", type=text_value,
                   help="the encoder's pixel format: yuv420p, yuv420p10le, or another it takes (default: the "
                        "input's bit depth where the encoder takes it, else 8 bits with a notice)")
    p.add_argument("--encoder-opt", dest="encoder_opts", action="append", type=_kv, metavar="KEY=VALUE",
                   help="encoder option, repeatable (e.g. crf=18, preset=veryfast); one the encoder does not "
                        "use is an error")
    p.add_argument("--audio", choices=AUDIO_MODES,
                   help=f"the input's audio (default: {d.audio}): copy where the container takes the codec, "
                        "else encode to its usual one (Opus for WebM, AAC for MP4) with a notice; encode; none")
    p.add_argument("-an", dest="audio", action="store_const", const="none", help="no audio (same as --audio none)")
    p.add_argument("--frames", "-frames:v", "-frames", "-vframes", type=integer,
                   help="stop after N frames (default: all)")
    p.add_argument("--strict", action="store_true", default=None,
                   help="fail (exit 3) on the first undecodable packet or corrupt frame instead of skipping it")
    p.add_argument("--ring-size", type=integer,
                   help=f"pinned host slots each way, 2 to {MAX_RING_SIZE} (default: {d.ring_size})")
    p.add_argument("--streams", type=integer, help=f"CUDA streams, 1 to {MAX_STREAMS} (default: {d.streams})")
    p.add_argument("--in-flight", type=integer,
                   help=f"frames in flight on the GPU, 1 to {MAX_IN_FLIGHT} (default: {d.in_flight})")
    p.add_argument("--pinned-cap-mib", type=integer, metavar="MIB",
                   help="page-locked host memory a run may take (default: half of the RAM); over it: exit 5")
    p.add_argument("--write-combined", action=argparse.BooleanOptionalAction, default=None,
                   help="input host slots in write-combined pinned memory, which the CPU writes past its caches "
                        f"and the GPU reads unsnooped (default: {'on' if d.write_combined else 'off'}; see "
                        "`pipeline probe`)")
    p.add_argument("--arena-headroom", type=number,
                   help=f"device arena size as a multiple of the frames in flight, 1 to {MAX_ARENA_HEADROOM:g} "
                        f"(default: {d.arena_headroom})")
    p.add_argument("--plugin", dest="plugins", action="append", metavar="PATH", type=file_name,
                   help="Python file registering extra filters, repeatable")
    # Batch takes neither --stats-json nor --preview (check_options says why): parsed, not offered.
    p.add_argument("--stats-json", type=file_name,
                   help="write the run statistics as JSON to this path (an existing file needs -y; never the input "
                        "or the output)" if single else argparse.SUPPRESS)
    p.add_argument("-q", "--quiet", action="store_true", default=None, help="no progress bar and no summary")
    bar = p.add_mutually_exclusive_group()  # ffmpeg's spellings, so that its scripts run
    bar.add_argument("-nostats", dest="stats", action="store_false", default=None,
                     help="no progress bar; the summary stays")
    bar.add_argument("-stats", dest="stats", action="store_true", default=None,
                     help="the progress bar, on a terminal (the default)")
    p.add_argument("-v", "-loglevel", "--loglevel", dest="loglevel", choices=tuple(LEVELS), default=None,
                   help="notices shown on stderr: quiet, error, warning, info (default), debug")
    p.add_argument("--debug", action="store_true", default=None, help="show tracebacks")
    _add_realtime_arguments(p.add_argument_group("real time"), d, single)


def _add_realtime_arguments(p, d: RunConfig, single: bool) -> None:
    p.add_argument("--input-format", metavar="NAME", type=text_value,
                   help="demuxer or capture device (v4l2, mpegts, ...)")
    p.add_argument("--input-opt", dest="input_opts", action="append", type=_kv, metavar="KEY=VALUE",
                   help="demuxer/protocol option passed to FFmpeg when opening, repeatable "
                        "(e.g. video_size=1280x720, fflags=nobuffer)")
    p.add_argument("-f", "--format", dest="output_format", metavar="NAME", type=text_value,
                   help="output muxer (e.g. mpegts, flv); default: from the output name, or the URL scheme")
    p.add_argument("--output-opt", dest="output_opts", action="append", type=_kv, metavar="KEY=VALUE",
                   help="muxer option for the output, repeatable (e.g. movflags=+faststart); one the muxer "
                        "does not use is an error; protocol options go in the URL (udp://host:port?pkt_size=1316)")
    p.add_argument("--timeout", type=number, metavar="SECONDS",
                   help=f"live sources: open and read timeout, and the stall watchdog (default: {d.timeout})")
    p.add_argument("--reconnect", type=integer, metavar="N",
                   help=f"live sources: reopen a stalled or lost source up to N times per outage (default: "
                        f"{d.reconnect}), then exit 3 keeping the frames done")
    p.add_argument("--realtime", "-re", action="store_true", default=None,
                   help="pace a file at its own frame rate (by timestamps), as a camera would deliver it")
    p.add_argument("--drop-policy", choices=DROP_POLICIES,
                   help=f"when processing falls behind a live or paced source (default: {d.drop_policy}: "
                        "block for files, drop-oldest for live or --realtime)")
    p.add_argument("--latency-budget", type=number, metavar="MS",
                   help="warn once when a frame takes longer from decode to packet, and count such frames")
    p.add_argument("--preview", action="store_true", default=None,
                   help="show the processed frames in a window, with fps and latency (needs a display)" if single
                   else argparse.SUPPRESS)
    p.add_argument("--nvtx", action="store_true", default=None,
                   help="emit NVTX ranges per stage and frame, for Nsight Systems")


def _add_run(sub, name: str, help_text: str) -> None:
    run = sub.add_parser(name, help=help_text, description=RUN_NOTES, epilog=EXIT_CODES,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.intermixed = True
    add_run_arguments(run, RunConfig())


def _add_filters(sub, name: str, help_text: str) -> None:
    fl = sub.add_parser(name, help=help_text)
    fl.add_argument("name", nargs="?", type=path_name, help="a filter name")
    fl.add_argument("--plugin", dest="plugins", action="append", metavar="PATH", type=file_name,
                    help="also load this plugin")
    fl.add_argument("--json", action="store_true",
                    help="print them as JSON: name, help, and each parameter's type, default, min, max, choices")


def _add_presets(sub, name: str, help_text: str) -> None:
    sub.add_parser(name, help=help_text)


def _add_bench(sub, name: str, help_text: str) -> None:
    from .bench import bench

    bench.add_arguments(sub.add_parser(name, help=help_text, formatter_class=argparse.RawDescriptionHelpFormatter,
                                       epilog=EXIT_CODES))


def _add_probe(sub, name: str, help_text: str) -> None:
    from .bench import probe

    probe.add_arguments(sub.add_parser(name, help=help_text))


def _add_warmup(sub, name: str, help_text: str) -> None:
    wu = sub.add_parser(name, help=help_text)
    wu.add_argument("--filters", dest="chains", action="append", metavar="CHAIN",
                    help="also compile this chain as runs fold it, repeatable (the default chain always)")


SAMPLES = """clips (NAME):
  sample    640x360, 30 fps, 3 s, H.264 + AAC       -> samples/sample.mp4 (the default)
  1080p     1920x1080, 60 fps, 10 s, H.264 + AAC    -> samples/bench_1080p.mp4
  4k        3840x2160, 30 fps, 10 s, H.264 + AAC    -> samples/bench_4k.mp4
  raw1080p  1920x1080, 60 fps, 5 s, rawvideo        -> samples/bench_1080p_raw.mkv
  raw4k     3840x2160, 30 fps, 4 s, rawvideo        -> samples/bench_4k_raw.mkv
Paths are relative to the current directory. Benchmark with them: pipeline bench samples/bench_1080p.mp4"""


def _add_sample(sub, name: str, help_text: str) -> None:
    sa = sub.add_parser(name, help=help_text,
                        description="Write a synthetic clip: textured, moving, seeded, each frame numbered large "
                                    "enough to read after lossy coding.\nAs `pipeline run` writes its output: to a "
                                    "hidden temporary file beside the target, renamed into place when complete;\n"
                                    "Ctrl-C, SIGTERM or SIGHUP stops at once with no clip written (exit 130/143/129).",
                        epilog=SAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sa.add_argument("name", nargs="?", default="sample", metavar="NAME", help="which clip (below; default: sample)")
    sa.add_argument("-o", "--output", metavar="PATH", type=file_name,
                    help="where to write it (default: the clip's path below); an existing file is replaced only with -y")
    add_overwrite_arguments(sa)
    sa.add_argument("--frames", type=integer, metavar="N", help="number of frames (default: the clip's)")
    sa.add_argument("--fps", type=_frame_rate, help="frame rate: a number, N/D (30000/1001) or ffmpeg's names "
                    "(ntsc, pal, film, ntsc-film) (default: the clip's)")
    sa.add_argument("--size", type=_size, metavar="WxH", help="frame size (default: the clip's)")
    sa.add_argument("--codec", type=text_value, help="video encoder (default: the clip's)")
    sa.add_argument("--pix-fmt", type=text_value, help="pixel format (default: yuv420p, or the encoder's first where it takes "
                    "none such: rgb8 for gif)")
    sa.add_argument("--crf", type=integer, help="libx264 quality, 0 (lossless) to 51 (default: the clip's)")
    sa.add_argument("-g", "--gop", type=integer, metavar="N",
                    help="a keyframe at least every N frames, as ffmpeg's -g (default: the encoder's, 250 for "
                         "libx264); short GOPs let --nvdec-sessions decode one file on several sessions")
    sa.add_argument("--no-audio", action="store_true", help="no audio track")
    sa.add_argument("--seed", type=integer, default=0, help="picture seed (default: 0)")


# ffmpeg's frame rate names (av_parse_video_rate)
_RATES = {"ntsc": Fraction(30000, 1001), "pal": Fraction(25), "qntsc": Fraction(30000, 1001), "qpal": Fraction(25),
          "sntsc": Fraction(30000, 1001), "spal": Fraction(25), "film": Fraction(24), "ntsc-film": Fraction(24000, 1001)}


def _frame_rate(text: str) -> float | Fraction:
    if text.lower() in _RATES:
        return _RATES[text.lower()]
    num, slash, den = text.partition("/")
    if slash:
        try:
            n, d = integer(num), integer(den)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number or N/D, got {text!r}") from None
        if d == 0:
            raise argparse.ArgumentTypeError(f"{text}: a rate over 0")
        return Fraction(n, d)
    try:
        return number(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, N/D or ffmpeg's name for a rate (ntsc, pal, film), "
                                         f"got {text!r}") from None


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (integer(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WxH, got {text!r}") from None
    return w, h


def _add_batch(sub, name: str, help_text: str) -> None:
    from .batch import cli as batch_cli

    ba = sub.add_parser(name, help=help_text,
                        description=batch_cli.NOTES, epilog=EXIT_CODES,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    batch_cli.add_arguments(ba)


# name -> (help, the function adding its parser with every option); the order of `pipeline --help`
_COMMANDS = {
    "run": ("process a video file or live stream", _add_run),
    "filters": ("list the filters, or show one", _add_filters),
    "presets": ("list the presets that --config takes by name, and where their files are", _add_presets),
    "sample": ("write a synthetic test or benchmark clip (seeded, with a frame counter)", _add_sample),
    "batch": ("process many files on a Dask cluster (one worker per GPU)", _add_batch),
    "bench": ("compare allocation strategies side by side on one input", _add_bench),
    "probe": ("measure CUDA allocation and copy costs on this GPU", _add_probe),
    "warmup": ("compile the CUDA kernels once on this machine, ahead of the first run", _add_warmup),
}
COMMANDS = tuple(_COMMANDS)
