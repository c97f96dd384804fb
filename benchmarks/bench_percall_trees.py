"""Per-call latency of hybrid_trt models from two source trees (e.g. this checkout and a worktree of an older
commit), in alternating fresh processes, so a change to the runtime can be shown not to slow the call path.

    python benchmarks/bench_percall_trees.py --trees /tmp/old,. [--models resnet18,detector,transformer]
        [--rounds 3] [--iters 200] [--out FILE]

Each round runs one process per tree, A then B then A..., and each process compiles every model (cold caches in
a temporary directory), warms up, and times ``--iters`` calls; a model's figure per tree is the median over
rounds of the per-process medians, and the ratio is taken per round (B / A) and its median reported.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, sys, time, statistics
sys.path.insert(0, os.environ["TREE"])
import torch
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
import hybrid_trt
from examples.models import build
out = {}
for name in os.environ["MODELS"].split(","):
    model, x = build(name)
    with torch.no_grad():
        fn = torch.compile(model.eval(), backend="hybrid_trt")
        for _ in range(10):
            fn(x)
        times = []
        for _ in range(int(os.environ["ITERS"])):
            t0 = time.perf_counter(); fn(x); times.append(time.perf_counter() - t0)
    out[name] = statistics.median(times) * 1e3
    torch._dynamo.reset()
print("RESULT " + json.dumps(out))
"""


def run_tree(tree: str, models: str, iters: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TREE": os.path.abspath(tree), "MODELS": models, "ITERS": str(iters),
               "THREADS": str(threads), "XDG_CACHE_HOME": os.path.join(tmp, "xdg"),
               "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor"), "PYTHONPATH": os.path.abspath(tree)}
        proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                              cwd=os.path.abspath(tree))
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"tree {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", required=True, help="two source trees, comma-separated: A (reference),B")
    ap.add_argument("--models", default="resnet18,detector,transformer")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args()
    trees = args.trees.split(",")
    per = {t: [] for t in trees}
    for r in range(args.rounds):
        for t in trees:
            per[t].append(run_tree(t, args.models, args.iters, args.threads))
            print(f"round {r + 1} {t}: {per[t][-1]}", file=sys.stderr, flush=True)
    a, b = trees
    lines = [f"# Per-call latency: {b} against {a}", "",
             f"- machine: {platform.machine()}, {os.cpu_count()} logical CPUs, {platform.platform()}; "
             f"{args.threads} torch threads; {args.rounds} alternating rounds of fresh processes, "
             f"{args.iters} timed calls each", "",
             f"| model | {a} ms | {b} ms | {b} / {a} (median of per-round ratios) |", "|---|---|---|---|"]
    for m in args.models.split(","):
        ma = statistics.median(p[m] for p in per[a])
        mb = statistics.median(p[m] for p in per[b])
        ratio = statistics.median(pb[m] / pa[m] for pa, pb in zip(per[a], per[b]))
        lines.append(f"| {m} | {ma:.2f} | {mb:.2f} | {ratio:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
