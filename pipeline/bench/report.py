"""How ``pipeline bench`` shows its results: tables for people, JSON for machines, a PNG chart."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.text import Text
from rich.table import Table

from ..reportfile import report_file, write_report

SCOPE_TITLES = {
    "gpu": "gpu scope: host slots, upload, kernels, download (frames decoded beforehand, output discarded)",
    "e2e": "e2e scope: decode, GPU, encode, as `pipeline run`",
}


def strategy_table(scope: str, rows: list[dict]) -> Table:
    t = Table(title=SCOPE_TITLES.get(scope, scope), title_justify="left")
    for name, justify in (("strategy", "left"), ("fps", "right"), ("x pooled", "right"), ("p50 ms", "right"),
                          ("p99 ms", "right"), ("device allocs/frame", "right"), ("H2D GB/s", "right"),
                          ("reserved / peak MiB", "right"), ("fragmentation", "right")):
        t.add_column(name, justify=justify)
    for r in rows:
        x = f"{r['x_pooled']:.2f}" if r.get("x_pooled") else "-"
        frag = r.get("fragmentation_peak")
        t.add_row(r["strategy"], f"{r['fps']:.1f}", x, f"{r['latency_p50_ms']:.2f}", f"{r['latency_p99_ms']:.2f}",
                  f"{r['device_allocs_per_frame']:g}", f"{r['h2d_gbps']:.2f}",
                  f"{r.get('bytes_reserved', 0) / 2**20:.0f} / {r.get('bytes_peak', 0) / 2**20:.0f}",
                  "-" if frag is None else f"{frag:.2f}")
    return t


def run_table(rows: list[dict]) -> Table:
    t = Table(title="`pipeline run` as a user runs it: one process per run (whole run: process start to exit)",
              title_justify="left")
    for name in ("decode", "output", "alloc", "whole-run fps", "x naive", "fps in run", "steady fps",
                 "first frame ms", "allocs/frame"):
        t.add_column(name, justify="left" if name in ("decode", "output", "alloc") else "right")
    for r in rows:
        if "error" in r:
            t.add_row(r["decode"], r["output"], r["alloc"], "-", "-", "-", "-", "-", r["error"][:60])
            continue
        x = f"{r['x_naive']:.2f}" if r.get("x_naive") else ""
        t.add_row(r["decode"], r["output"], r["alloc"], f"{r['process_fps']:.1f}", x, f"{r['fps']:.1f}",
                  f"{r['steady_fps']:.1f}", f"{r['ttff_ms']:.0f}" if r.get("ttff_ms") is not None else "-",
                  f"{r['allocs_per_frame']:g}")
    return t


def peers_table(peers: dict[str, Any]) -> Table:
    t = Table(title="ceilings and peers (same clip, same encoder settings)", title_justify="left")
    t.add_column("what")
    t.add_column("fps", justify="right")
    t.add_column("note")
    for key, row in peers.items():
        if isinstance(row, dict) and "fps" in row:
            t.add_row(row.get("label", key), f"{row['fps']:.1f}", row.get("note", ""))
        elif isinstance(row, dict) and "skipped" in row:
            t.add_row(row.get("label", key), "-", row["skipped"])
    return t


def bandwidth_table(rows: list[dict]) -> Table:
    t = Table(title="copy bandwidth for one frame", title_justify="left")
    for name in ("direction", "memory", "GB/s"):
        t.add_column(name, justify="right" if name == "GB/s" else "left")
    for r in rows:
        t.add_row(r["direction"], r["memory"], f"{r['gbps']:.1f}")
    return t


def render(result: dict[str, Any], console: Console) -> None:
    dev = result.get("device", {})
    size = result.get("size")
    console.print(Text(result["input"], style="bold") + Text((f" {size[0]}x{size[1]}" if size else "")
                  + f", filters {result['filters']!r}, {dev.get('name', '?')}, {dev.get('cpu_cores', '?')} CPU cores"))
    for scope, rows in result["scopes"].items():
        console.print(strategy_table(scope, rows))
    if result.get("run"):
        console.print(run_table(result["run"]))
    if result.get("peers"):
        console.print(peers_table(result["peers"]))
    if result.get("bandwidth"):
        console.print(bandwidth_table(result["bandwidth"]))


def write_json(result: dict[str, Any], path: Path, exclusive: bool = False) -> None:
    """``exclusive``: fail (FileExistsError) rather than replace a file that exists by now."""
    write_report(path, json.dumps(result, indent=2) + "\n", exclusive)


def write_chart(result: dict[str, Any], path: Path, console: Console, exclusive: bool = False) -> Path | None:
    """Frames per second per strategy and scope, and the latency distributions (a PNG); ``exclusive`` as
    for :func:`write_json`."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        console.print("pipeline: chart skipped: matplotlib is not installed (pip install .[bench])")
        return None
    scopes = list(result["scopes"].items())
    fig, axes = plt.subplots(2, len(scopes), figsize=(6.5 * len(scopes), 8), squeeze=False)
    for col, (scope, rows) in enumerate(scopes):
        _fps_bars(axes[0][col], scope, rows, result.get("peers") if scope == "e2e" else None)
        _latency_boxes(axes[1][col], scope, rows)
    dev = result.get("device", {}).get("name", "")
    size = result.get("size")
    fig.suptitle(f"pipeline bench: {Path(result['input']).name}" + (f" {size[0]}x{size[1]}" if size else "")
                 + f" on {dev}")
    fig.tight_layout()
    try:
        with report_file(path, exclusive, binary=True) as f:
            fig.savefig(f, dpi=110, format="png")
    finally:
        plt.close(fig)
    return path


def _fps_bars(ax, scope: str, rows: list[dict], peers: dict | None) -> None:
    names = [r["strategy"] for r in rows]
    fps = [r["fps"] for r in rows]
    bars = ax.bar(names, fps, color=["#2a7ab0" if n == "pool" else "#b0b0b0" for n in names])
    ax.bar_label(bars, fmt="%.0f")
    for key, style in (("transcode", "--"), ("decode", ":")):
        row = (peers or {}).get(key)
        if isinstance(row, dict) and "fps" in row:
            ax.axhline(row["fps"], linestyle=style, color="#c0392b", label=f"{row.get('label', key)} {row['fps']:.0f}")
    if peers:
        ax.legend(loc="upper right", fontsize=8)
    ax.set_title(f"{scope}: frames per second (higher is better)")
    ax.set_ylabel("fps")


def _latency_boxes(ax, scope: str, rows: list[dict]) -> None:
    data = [r["latency_ms"] or [0.0] for r in rows]
    ax.boxplot(data, showfliers=False)
    ax.set_xticks(range(1, len(rows) + 1), [r["strategy"] for r in rows])
    ax.set_title(f"{scope}: per-frame latency (lower is better)")
    ax.set_ylabel("ms")


def script_run(script: str, argv: list[str] | None) -> dict[str, str]:
    """What a benchmark script's report starts with: when (UTC) and the command that ran it."""
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python", f"scripts/{script}", *(argv if argv is not None else sys.argv[1:])])}


def script_heading(title: str, report: dict) -> list[str]:
    """The Markdown lines a benchmark script's report opens with: its title, when, the command, the machine
    (``report`` from :func:`script_run`, with ``gpu`` and ``cpu_count``)."""
    return [f"## {title}", "", f"- **Date:** {report['date']}", f"- **Command:** `{report['command']}`",
            f"- **Hardware:** {report['gpu']}, {report['cpu_count']} CPU cores"]


def markdown_rows(header: list[str], align: str, rows: list[dict], keys: Callable[[dict], list],
                  values: Callable[[dict], list]) -> list[str]:
    """A Markdown table of ``rows``: ``keys(row)`` (what the row is), then ``values(row)``, or for a row that
    has an ``error``, the error. ``align``: "l" or "r" for each column."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    for row in rows:
        first = keys(row)
        rest = values(row) if "error" not in row else [f"error: {row['error']}"] + [""] * (len(header) - len(first) - 1)
        lines.append("| " + " | ".join(str(v) for v in first + rest) + " |")
    return lines


def write_script_report(out_dir: Path, stem: str, report: dict, text: str) -> None:
    """A benchmark script's results: ``stem``.json for machines, ``stem``.md (printed too) for people."""
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out_dir / f"{stem}.md").write_text(text)
    print(text)
