#!/usr/bin/env python3
"""Whole runs as a user sees them: ``pipeline run`` against a PyNvVideoCodec pipeline, and what the exit costs.

    python scripts/bench_whole_runs.py [--out-dir out/whole_runs] [--repeats 3] [--clips 4k,1080p]

The peer is what PyNvVideoCodec's users write (``shared/PEERS.md``, "Decode -> blur -> download -> libx264"):
NVDEC decodes into device memory (NV12), CuPy blurs each plane (``cupyx.scipy.ndimage.gaussian_filter``,
sigma 1.5 on luma, half that on the half-size chroma), the I420 result is downloaded into one of eight pinned
buffers and a second thread encodes it with libx264 ultrafast into MP4. ``pipeline run`` runs the same clip
with ``--filters gblur=sigma=1.5 --encoder-opt preset=ultrafast``, once leaving through the command's own exit
(:func:`pipeline.cli.entry`) and once through the interpreter's normal exit with everything closed
(``pipeline.cli.main``), and with ``-o null`` both ways. The two "from open" rows time the peer and
``pipeline.run`` on PEERS.md's clock instead: CuPy imported and the CUDA context made before it starts, from
the open (the call) to the output closed. Every row is a fresh process, rows alternate in order;
reported: frames over the process's wall time (interpreter start to exit), steady fps (after the first 8
frames), and "whole run": from the run's set-up to the output closed (the peer's own clock from just after
NumPy's and PyAV's imports to its output closed; ours ``wall_s`` + ``finish_ms``), so that both count CuPy's
import and the CUDA context in the run; "after the run": the process's wall time less the whole run and the
imports. Clips as PEERS.md's: 4K30 120 frames and 1080p60 300 frames, H.264 (libx264 veryfast), the encoder's
default GOP (a single one at 4K); ``tiny`` (320x240, 30 frames) checks the script on any machine. Writes
whole_runs.json and whole_runs.md.

The peer needs PyNvVideoCodec (``pip install pynvvideocodec``) and CuPy; without it its rows say so.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CLIPS = {"4k": (3840, 2160, 30, 120), "1080p": (1920, 1080, 60, 300), "tiny": (320, 240, 30, 30)}  # w, h, fps, frames
SIGMA = 1.5
INTERPRETER_EXIT = "import sys; from pipeline.cli import main; sys.exit(main(sys.argv[1:]))"
ROWS = ("peer", "ours", "ours, interpreter exit", "ours -o null", "ours -o null, interpreter exit",
        "peer, from open", "ours, from open")
FROM_OPEN = ("peer, from open", "ours, from open")  # PEERS.md's clock: CuPy imported and the context made first


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=ROOT / "out" / "whole_runs")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--clips", default="4k,1080p")
    p.add_argument("--peer-once", nargs=2, metavar=("CLIP", "OUT"), help=argparse.SUPPRESS)
    p.add_argument("--ours-once", nargs=2, metavar=("CLIP", "OUT"), help=argparse.SUPPRESS)
    p.add_argument("--from-open", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def context_first() -> None:
    """CuPy imported and the CUDA context made, which PEERS.md's "whole run" (open to output closed) leaves
    out; nothing where there is no CuPy (the CPU backend's check of this script)."""
    try:
        import cupy
    except ImportError:
        return
    cupy.cuda.Device(0).use()
    cupy.empty(1)  # the context, current on this thread


def peer_once(clip: str, out: str, from_open: bool = False) -> dict:
    """The peer pipeline, once; its figures as JSON on stdout."""
    imported = time.perf_counter()
    import av
    import numpy as np

    if from_open:
        import cupyx.scipy.ndimage  # noqa: F401
        import PyNvVideoCodec  # noqa: F401
        context_first()
    t0 = time.perf_counter()  # as for ours: NumPy and PyAV before, CuPy's import and the context in the run
    import cupy
    import cupyx
    import cupyx.scipy.ndimage as ndi
    import PyNvVideoCodec as nvc

    with av.open(clip) as probe:
        v = probe.streams.video[0]
        w, h, rate = v.codec_context.width, v.codec_context.height, v.average_rate
    context_first()
    stream = cupy.cuda.Stream(non_blocking=True)
    dmx = nvc.CreateDemuxer(filename=clip)
    dec = nvc.CreateDecoder(gpuid=0, codec=dmx.GetNvCodecId(), cudacontext=cupy.cuda.driver.ctxGetCurrent(),
                            cudastream=stream.ptr, usedevicememory=True)
    container = av.open(out, "w")
    vs = container.add_stream("libx264", rate=rate)
    vs.width, vs.height, vs.pix_fmt = w, h, "yuv420p"
    vs.options = {"preset": "ultrafast"}
    vs.thread_type = "AUTO"
    slots = [cupyx.empty_pinned((h * 3 // 2, w), np.uint8) for _ in range(8)]
    i420 = cupy.empty((h * 3 // 2, w), np.uint8)
    full, free = queue.Queue(6), queue.Queue()
    for i in range(len(slots)):
        free.put(i)
    first_packet: list[float] = []
    handed: list[float] = []  # each frame's encode call returned, as ours counts it (RunStats.done_at)

    def encode():
        while (item := full.get()) is not None:
            i, pts = item
            frame = av.VideoFrame.from_numpy_buffer(slots[i], format="yuv420p")
            frame.pts = pts
            for packet in vs.encode(frame):
                if not first_packet:
                    first_packet.append(time.perf_counter())
                container.mux(packet)
            handed.append(time.perf_counter())
            free.put(i)  # libx264 copied the picture
        for packet in vs.encode():
            container.mux(packet)

    encoder = threading.Thread(target=encode)
    encoder.start()
    n, size = 0, w * h * 3 // 2
    u_rows = h // 4  # an (h/2, w/2) chroma plane, as rows of the (h*3/2, w) I420 buffer
    with stream:
        for packet in dmx:
            for frame in dec.Decode(packet):
                if frame.framesize() != size:
                    raise RuntimeError(f"frame of {frame.framesize()} bytes, not {size} (pitched NV12?)")
                mem = cupy.cuda.UnownedMemory(frame.GetPtrToPlane(0), size, frame)
                nv12 = cupy.ndarray((h * 3 // 2, w), cupy.uint8, cupy.cuda.MemoryPointer(mem, 0))
                uv = nv12[h:].reshape(h // 2, w // 2, 2).astype(cupy.float32)
                y = ndi.gaussian_filter(nv12[:h].astype(cupy.float32), SIGMA)
                i420[:h] = cupy.clip(cupy.rint(y), 0, 255).astype(cupy.uint8)
                for k in range(2):
                    plane = ndi.gaussian_filter(uv[..., k], SIGMA / 2)
                    i420[h + k * u_rows:h + (k + 1) * u_rows] = \
                        cupy.clip(cupy.rint(plane), 0, 255).astype(cupy.uint8).reshape(u_rows, w)
                slot = free.get()
                i420.get(stream=stream, out=slots[slot], blocking=False)
                stream.synchronize()  # the decoder's frame is reused by its next Decode
                full.put((slot, n))
                n += 1
    full.put(None)
    encoder.join()
    container.close()
    done = time.perf_counter()
    return {"frames": n, "whole_s": done - t0, "imports_s": t0 - imported, "steady_fps": steady_fps(handed),
            "ttff_ms": (first_packet[0] - t0) * 1e3 if first_packet else None}


def ours_once(clip: str, out: str) -> dict:
    """``pipeline.run`` once in a process whose CuPy and context were made before the clock, as the peer's
    "from open" row: from the call to the output closed (the statistics' set-up, run and finish; the
    objects let go as the call returns come after, as the peer's decoder is let go after its clock stops);
    its figures as JSON on stdout."""
    imported = time.perf_counter()
    context_first()
    import pipeline
    import pipeline.build  # noqa: F401  what the command imports before its run's clock starts
    import pipeline.engine  # noqa: F401

    t0 = time.perf_counter()
    stats = pipeline.run(clip, out, filters=f"gblur=sigma={SIGMA}", encoder_opts={"preset": "ultrafast"},
                         overwrite=True, quiet=True)
    returned = time.perf_counter()
    return {"frames": stats["frames_out"], "whole_s": stats["wall_s"] + (stats.get("finish_ms") or 0.0) / 1e3,
            "returned_s": returned - t0, "imports_s": t0 - imported, "steady_fps": stats.get("steady_fps"),
            "ttff_ms": stats.get("time_to_first_frame_ms")}


def steady_fps(times: list[float], skip: int = 8) -> float | None:
    """Frames per second after the first ``skip``, as ``RunStats.steady_fps`` counts ours."""
    return (len(times) - 1 - skip) / (times[-1] - times[skip]) if len(times) > skip + 1 else None


def run_row(row: str, clip: Path, out_dir: Path) -> dict:
    out = out_dir / "out.mp4"
    stats = out_dir / "stats.json"
    if row.startswith("peer"):
        cmd = [sys.executable, __file__, "--peer-once", str(clip), str(out), *(["--from-open"] if row in FROM_OPEN else [])]
    elif row in FROM_OPEN:
        cmd = [sys.executable, __file__, "--ours-once", str(clip), str(out)]
    else:
        entry = ["-c", INTERPRETER_EXIT] if "interpreter exit" in row else ["-m", "pipeline"]
        target = "null" if "null" in row else str(out)
        cmd = [sys.executable, *entry, "run", str(clip), "-o", target, "-y", "-q", "--filters", f"gblur=sigma={SIGMA}",
               "--encoder-opt", "preset=ultrafast", "--stats-json", str(stats)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1][:300]}
    own_clock = row.startswith("peer") or row in FROM_OPEN  # figures printed by the child, not --stats-json
    if own_clock:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        frames, whole = data["frames"], data["whole_s"]
    else:
        data = json.loads(stats.read_text())
        frames, whole = data["frames_out"], data["wall_s"] + (data.get("finish_ms") or 0.0) / 1e3
    detail = {k: data[k] for k in ("ttff_ms", "returned_s") if k in data} if own_clock else {
        k: data.get(k) for k in ("time_to_first_frame_ms", "startup_ms", "finish_ms", "steady_fps", "decode")}
    return {"detail": detail, "frames": frames, "process_s": wall, "process_fps": frames / wall, "whole_fps": frames / whole,
            "steady_fps": data.get("steady_fps") or 0.0,
            "after_run_s": wall - whole - (data["imports_s"] if own_clock
                                           else data.get("startup_ms", {}).get("imports", 0.0) / 1e3)}


def measure(clip: Path, out_dir: Path, repeats: int, say) -> list[dict]:
    runs: dict[str, list[dict]] = {row: [] for row in ROWS}
    run_row("ours", clip, out_dir)  # kernel and file caches warm, as on a used machine
    for r in range(repeats):
        for row in (ROWS if r % 2 == 0 else ROWS[::-1]):
            runs[row].append(run_row(row, clip, out_dir))
    table = []
    for row, results in runs.items():
        good = [x for x in results if "error" not in x]
        entry = {"row": row, "runs": len(good)}
        if not good:
            entry["error"] = results[0]["error"]
        else:
            entry["detail_last_run"] = good[-1]["detail"]
        for key in ("frames", "process_s", "process_fps", "whole_fps", "steady_fps", "after_run_s"):
            if good:
                entry[key] = round(statistics.median(x[key] for x in good), 3 if key.endswith("_s") else 1)
                entry[key + "_all"] = [round(x[key], 3 if key.endswith("_s") else 1) for x in good]
        say(json.dumps(entry))
        table.append(entry)
    return table


def markdown(report: dict) -> str:
    from pipeline.bench.report import markdown_rows, script_heading

    lines = [*script_heading("Whole runs against PyNvVideoCodec, and the exit (`scripts/bench_whole_runs.py`)",
                             report), ""]
    for name, rows in report["clips"].items():
        lines += [f"### {name} ({report['frames'][name]} frames), medians of {report['repeats']}", "",
                  *markdown_rows(["pipeline", "frames", "process s", "process fps", "whole-run fps", "steady fps",
                                  "after the run s"], "lrrrrrr", rows, lambda r: [r["row"]],
                                 lambda r: [f"{r['frames']:.0f}", r["process_s"], r["process_fps"], r["whole_fps"],
                                            r["steady_fps"], r["after_run_s"]])]
        lines.append("")
    return "\n".join(lines)


def clip_for(name: str, out_dir: Path) -> Path:
    from pipeline.sample import make_clip

    w, h, fps, frames = CLIPS[name]
    path = out_dir / f"peer_{name}.mp4"
    if not path.exists():
        make_clip(path, width=w, height=h, fps=fps, frames=frames, seed=7, crf=23,
                  options={"preset": "veryfast"}, audio=False)
    return path


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.peer_once:
        print(json.dumps(peer_once(*args.peer_once, from_open=args.from_open)))
        return 0
    if args.ours_once:
        print(json.dumps(ours_once(*args.ours_once)))
        return 0
    from pipeline.bench.report import script_run, write_script_report

    args.out_dir.mkdir(parents=True, exist_ok=True)

    def say(m: str) -> None:
        print(f"bench_whole_runs: {m}", flush=True)

    clips, frames = {}, {}
    for name in args.clips.split(","):
        frames[name] = CLIPS[name][3]
        clips[name] = measure(clip_for(name, args.out_dir), args.out_dir, args.repeats, say)
    from pipeline.gpu.cuda import cupy, gpu_status
    from pipeline.gpu.probe import device_info

    gpu = device_info(cupy())["name"] if gpu_status()[0] else "no GPU"
    report = {**script_run("bench_whole_runs.py", argv), "gpu": gpu,
              "cpu_count": os.cpu_count(), "repeats": args.repeats, "frames": frames, "clips": clips}
    write_script_report(args.out_dir, "whole_runs", report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
