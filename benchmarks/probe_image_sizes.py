"""A detector called with images of a new size, as a new user's loop does: how long the first call of each new
size takes, per backend and ``dynamic`` setting.

    python benchmarks/probe_image_sizes.py --out results.md [--model fasterrcnn_mobilenet_v3_large_fpn]
        [--sizes 160x200,176x224,150x190] [--limit-s 300]

Each variant (backend "hybrid_trt" or "inductor"; ``dynamic=None``, torch's default, which traces symbolic sizes
after a second shape, or ``dynamic=False``, a compile per size) runs in a child process of its own, with random
weights, two images per call; a variant still compiling after ``--limit-s`` is stopped, and its row says which
size it was at. Every call's detections are compared with eager (count and scores).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = (("hybrid_trt", "none"), ("hybrid_trt", "false"), ("inductor", "none"), ("inductor", "false"))


def child(model_name: str, backend: str, dynamic: str, sizes: list):
    import torch
    import torchvision
    sys.path.insert(0, ROOT)
    import hybrid_trt  # noqa: F401 - registers the backend
    torch.manual_seed(0)
    model = getattr(torchvision.models.detection, model_name)(weights=None, weights_backbone=None, min_size=160,
                                                              max_size=224).eval()
    compiled = torch.compile(model, backend=backend, dynamic={"none": None, "false": False}[dynamic])
    with torch.no_grad():
        for h, w in sizes:
            images = [torch.rand(3, h, w), torch.rand(3, h, w)]
            print(json.dumps({"size": f"{h}x{w}", "started": True}), flush=True)
            t0 = time.perf_counter()
            got = compiled(images)
            seconds = time.perf_counter() - t0
            expected = model(images)
            same = all(len(g["scores"]) == len(e["scores"]) and torch.allclose(g["scores"], e["scores"], atol=1e-4)
                       for g, e in zip(got, expected))
            print(json.dumps({"size": f"{h}x{w}", "seconds": seconds, "matches_eager": same,
                              "detections": [len(g["scores"]) for g in got]}), flush=True)


def run_variant(args, backend: str, dynamic: str) -> dict:
    cmd = [sys.executable, __file__, "--child", backend, dynamic, "--model", args.model, "--sizes", args.sizes]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue = queue.Queue()  # a reader thread: select() cannot see lines already in the pipe's buffer
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)],
                     daemon=True).start()
    rows, started = [], None
    deadline = time.monotonic() + args.limit_s
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        row = json.loads(line)
        if row.get("started"):
            started = (row["size"], time.monotonic())
        else:
            rows.append(row)
            started = None
    stopped = None
    if proc.poll() is None:
        proc.kill()
        if started is not None:
            stopped = f"{started[0]}: still compiling after {time.monotonic() - started[1]:.0f} s (stopped)"
    proc.wait()
    return {"backend": backend, "dynamic": dynamic, "rows": rows, "stopped": stopped}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", nargs=2)
    ap.add_argument("--model", default="fasterrcnn_mobilenet_v3_large_fpn")
    ap.add_argument("--sizes", default="160x200,176x224,150x190")
    ap.add_argument("--limit-s", type=float, default=300.0)
    ap.add_argument("--out")
    args = ap.parse_args()
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    if args.child:
        child(args.model, *args.child, sizes)
        return
    import torch
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = [f"# First call per new image size: {args.model}", "",
             f"- machine: {platform.machine()}, {os.cpu_count()} logical CPU cores, {platform.system()}; torch "
             f"{torch.__version__}; commit {commit}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             f"- two images per call, sizes in call order {args.sizes}; a variant is stopped after {args.limit_s:.0f} s",
             "", "| backend | dynamic | " + " | ".join(f"{s} s" for s in args.sizes.split(",")) + " | all match eager | stopped |",
             "|---|---|" + "---|" * len(sizes) + "---|---|"]
    for backend, dynamic in VARIANTS:
        result = run_variant(args, backend, dynamic)
        by_size = {r["size"]: r for r in result["rows"]}
        cells = [f"{by_size[s]['seconds']:.1f}" if s in by_size else "-" for s in args.sizes.split(",")]
        match = all(r["matches_eager"] for r in result["rows"]) if result["rows"] else "-"
        lines.append(f"| {backend} | {dynamic} | " + " | ".join(cells) + f" | {match} | {result['stopped'] or ''} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
