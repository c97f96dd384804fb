"""Per-call cost of a loaded package: AOTInductor's own call against the loader's ``boxed_run``, in one process.

    .venv/bin/python benchmarks/bench_package_call.py [--models conv,resnet18] [--rounds 30] [--iters 200] [--out FILE]

Each model is exported once (``hybrid_trt.export``, default options) and loaded once; the same ``DeployedModel``
is then timed with two callables behind it, alternating per round: ``AOTICompiledModel.__call__`` (which flattens
the arguments and unflattens the outputs by their treespecs at every call; what a package called before
``export/deploy.py``'s ``_flat_call``) and ``_flat_call``'s ``boxed_run`` on the input tensors (what it calls now).
``conv`` is one 3x3 convolution on a 1x3x16x16 input (the call's fixed cost dominates); ``resnet18`` the
example ResNet-18 at 1x3x224x224 (``examples/models.py``). Medians of per-round medians; the difference is what
each call saves. The table goes to stdout and, with --out, to a Markdown file with the machine and commit.
"""
from __future__ import annotations

import argparse
import functools
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _model(name: str):
    import torch
    if name == "conv":
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()).eval(), \
            torch.randn(1, 3, 16, 16)
    from examples.models import build
    return build(name)


def _time(fn, x, iters: int) -> float:
    t0 = time.perf_counter()
    for _ in range(iters):
        fn(x)
    return (time.perf_counter() - t0) / iters * 1e6


def run(name: str, rounds: int, iters: int, workdir: str) -> dict:
    import torch
    import hybrid_trt
    from hybrid_trt.engines.op import run_surfacing_failures
    from hybrid_trt.export import deploy
    model, x = _model(name)
    path = hybrid_trt.export(model, (x,), path=os.path.join(workdir, f"{name}.pkg"))
    loaded = hybrid_trt.load(path)
    calls = {"AOTInductor's call": functools.partial(run_surfacing_failures, loaded._aoti),
             "boxed_run (now)": functools.partial(run_surfacing_failures, deploy._flat_call(loaded._aoti))}
    assert calls["boxed_run (now)"].args[0] is not loaded._aoti, "the loader's boxed_run is not used here"
    times = {k: [] for k in calls}
    with torch.no_grad():
        expected = model(x)
        for label, call in calls.items():
            loaded._run = call
            assert torch.allclose(loaded(x), expected, rtol=1e-4, atol=1e-4), label
            for _ in range(20):
                loaded(x)
        for _ in range(rounds):
            for label, call in calls.items():
                loaded._run = call
                times[label].append(_time(loaded, x, iters))
    return {k: statistics.median(v) for k, v in times.items()}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="conv,resnet18")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--out")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(2)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-package-call-") as workdir:
        for name in args.models.split(","):
            got = run(name, args.rounds, args.iters, workdir)
            old, new = got["AOTInductor's call"], got["boxed_run (now)"]
            rows.append(f"| {name} | {old:.1f} | {new:.1f} | {old - new:.1f} | {new / old:.3f} |")
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.processor()) if os.path.exists("/proc/cpuinfo") else platform.processor()
    text = "\n".join([
        f"## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {_commit()}",
        "",
        f"`benchmarks/bench_package_call.py --models {args.models} --rounds {args.rounds} --iters {args.iters}`; "
        f"{cpu}, {os.cpu_count()} logical cores, torch {torch.__version__}, 2 threads, load average "
        f"{os.getloadavg()[0]:.1f} at the end. A loaded package's call, us (median of {args.rounds} rounds of "
        f"{args.iters} calls, the two callables alternating per round):",
        "",
        "| model | AOTInductor's call us | boxed_run (now) us | saved us | now / before |",
        "|---|---|---|---|---|",
        *rows, ""])
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
