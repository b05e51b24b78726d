#!/usr/bin/env python3
"""Where a ``pipeline`` command's start-up goes, thread by thread: a sampler takes every thread's Python stack
every few milliseconds from the moment this script starts until the command ends (or ``--seconds``), then
prints, for each time slice, what each thread was doing (its innermost frame inside the project, else the
innermost frame at all), and a table of the frames seen most often.

    python scripts/startup_profile.py [--interval-ms 2] [--seconds 3] [--json OUT] -- run clip.mp4 -o null

The sampler needs the interpreter's lock to take a sample, so a thread holding it for long (an import, a
C call that keeps it) shows as gaps in the timeline; time spent in C calls that release it shows as the
Python line that made the call.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import threading
import time

T0 = time.perf_counter()
PROJECT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pipeline")


def where(frame) -> str:
    """The innermost frame in the project (with the frame it called out of), else the innermost one."""
    inner = frame
    while frame is not None:
        if frame.f_code.co_filename.startswith(PROJECT):
            callee = f" -> {_short(inner)}" if inner is not frame else ""
            return f"{_short(frame)}{callee}"
        frame = frame.f_back
    return _short(inner)


def _short(frame) -> str:
    name = frame.f_code.co_filename
    name = os.path.relpath(name, os.path.dirname(PROJECT)) if name.startswith(PROJECT) else os.path.basename(name)
    return f"{name}:{frame.f_lineno} {frame.f_code.co_name}"


class Sampler(threading.Thread):
    def __init__(self, interval: float, seconds: float):
        super().__init__(name="startup-sampler", daemon=True)
        self.interval, self.seconds = interval, seconds
        self.samples: list[tuple[float, dict[str, str]]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        me = threading.get_ident()
        while not self.stopped.is_set() and time.perf_counter() - T0 < self.seconds:
            names = {t.ident: t.name for t in threading.enumerate()}
            now = (time.perf_counter() - T0) * 1e3
            stacks = {names.get(ident, str(ident)): where(frame)
                      for ident, frame in sys._current_frames().items() if ident != me}
            self.samples.append((now, stacks))
            time.sleep(self.interval)


def report(samples, slice_ms: float, top: int) -> None:
    last: dict[str, str] = {}
    for t, stacks in samples:
        changed = {k: v for k, v in stacks.items() if last.get(k) != v}
        if changed:
            for name, what in sorted(changed.items()):
                print(f"{t:8.1f} ms  {name[:28]:28s} {what}")
            last = stacks
    counts: collections.Counter = collections.Counter()
    for _, stacks in samples:
        for name, what in stacks.items():
            counts[(name, what)] += 1
    print(f"\nmost seen (samples of about {slice_ms:.1f} ms):")
    for (name, what), n in counts.most_common(top):
        print(f"{n * slice_ms:8.1f} ms  {name[:28]:28s} {what}")


def main() -> int:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--interval-ms", type=float, default=2.0)
    p.add_argument("--seconds", type=float, default=3.0, help="stop sampling after this long")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--json", help="write the samples here")
    args = p.parse_args(argv[:split])
    sampler = Sampler(args.interval_ms / 1e3, args.seconds)
    sampler.start()
    from pipeline.cli import main as pipeline_main

    code = pipeline_main(argv[split + 1:])
    sampler.stopped.set()
    sampler.join()
    report(sampler.samples, args.interval_ms, args.top)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(sampler.samples, f)
    print(f"exit {code}, {(time.perf_counter() - T0) * 1e3:.0f} ms after this script started")
    return code


if __name__ == "__main__":
    sys.exit(main())
