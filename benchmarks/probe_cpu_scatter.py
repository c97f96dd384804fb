"""Why index_put stays with Inductor on ONNX Runtime's CPU provider: a scatter block timed three ways.

    .venv/bin/python benchmarks/probe_cpu_scatter.py [--out FILE]

Each block is ``relu(f * 2 + 1)`` written into a zero canvas (a pillar scatter: ``canvas[:, idx] = f.t()``, or
accumulated: ``index_put(..., accumulate=True)``; and ``scatter_add`` into a (cells, channels) grid), then
``sigmoid(canvas * 3)``: eager, Inductor, and hybrid_trt with the scatter delegated (the CPU decline lifted for
the measurement, ``SLOW_ON_CPU``) and with it declined (the default). Median of 21 calls after two warm-up calls,
in one process; the figures to compare are those of one row.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time

import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import hybrid_trt  # noqa: E402
from hybrid_trt.delegates import onnxruntime_delegate  # noqa: E402


class Canvas(nn.Module):
    def __init__(self, channels: int, cells: int, mode: str):
        super().__init__()
        self.channels, self.cells, self.mode = channels, cells, mode

    def forward(self, f, idx):
        f = torch.relu(f * 2 + 1)
        if self.mode == "scatter_add":
            grid = f.new_zeros(self.cells, self.channels).scatter_add(0, idx[:, None].expand(-1, self.channels), f)
            return torch.sigmoid(grid * 3)
        canvas = f.new_zeros(self.channels, self.cells)
        if self.mode == "accumulate":
            canvas = canvas.index_put((torch.arange(self.channels)[:, None], idx[None, :]), f.t(), accumulate=True)
        else:
            canvas[:, idx] = f.t()
        return torch.sigmoid(canvas * 3)


def median_ms(fn, *args) -> float:
    fn(*args)
    fn(*args)
    times = []
    for _ in range(21):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return sorted(times)[10] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    cases = [(64, 248 * 216, 12000, "put"), (64, 248 * 216, 12000, "accumulate"), (64, 248 * 216, 30000, "put"),
             (64, 248 * 216, 30000, "accumulate"), (128, 100 * 100, 5000, "put"), (8, 64 * 64, 500, "put"),
             (64, 248 * 216, 12000, "scatter_add")]
    for channels, cells, points, mode in cases:
        model = Canvas(channels, cells, mode).eval()
        f = torch.randn(points, channels)
        idx = torch.randperm(cells)[:points] if mode != "scatter_add" else torch.randint(0, cells, (points,))
        row = {}
        with torch.no_grad():
            expected = model(f, idx)
            row["eager"] = median_ms(model, f, idx)
            for name, backend, slow in (("inductor", "inductor", None), ("delegated", "hybrid_trt", frozenset()),
                                        ("default", "hybrid_trt", onnxruntime_delegate.SLOW_ON_CPU)):
                torch._dynamo.reset()
                saved = onnxruntime_delegate.SLOW_ON_CPU
                if slow is not None:
                    onnxruntime_delegate.SLOW_ON_CPU = slow
                try:
                    # No engine store: the graph key does not see SLOW_ON_CPU changed in this process (only the
                    # sources it lives in), so a stored graph of the other variant would be served.
                    options = {"cache": False} if backend == "hybrid_trt" else None
                    compiled = torch.compile(model, backend=backend, options=options)
                    assert torch.allclose(compiled(f, idx), expected, rtol=1e-4, atol=1e-4), name
                    row[name] = median_ms(compiled, f, idx)
                finally:
                    onnxruntime_delegate.SLOW_ON_CPU = saved
        rows.append((f"{channels} x {cells}, {points} points, {mode}", row))
        print(rows[-1], flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    lines = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical cores, "
             f"torch {torch.__version__}, onnxruntime {__import__('onnxruntime').__version__}, commit {commit}, "
             f"load average before {os.getloadavg()[0]:.2f}", "",
             "| block (channels x cells, points, write) | eager ms | Inductor ms | hybrid, scatter delegated ms | "
             "hybrid default (CPU: declined) ms |", "|---|---|---|---|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {r['eager']:.2f} | {r['inductor']:.2f} | {r['delegated']:.2f} | {r['default']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
