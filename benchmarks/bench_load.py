"""Time to first output on a fresh process: loading an exported package vs compiling with torch.compile.

    .venv/bin/python benchmarks/bench_load.py [--model resnet18] [--repeats 3] [--inductor] [--out FILE]

The package is exported once (``hybrid_trt.export``). Then, alternating, fresh processes each
- compile cold: ``torch.compile(model, backend="hybrid_trt")`` with empty engine and Inductor cache directories,
  then the first call;
- load: ``hybrid_trt.load(package)``, then the first call;
- (``--inductor``) ``torch.compile(model)`` with an empty Inductor cache directory, then the first call.
Each process reports the time from just before its compile/load call to the first output (model construction
and imports excluded, identical on both sides) and the parent measures launch to first output. Medians over
the repeats; the ratio load / compile is the issue's target (<= 20%). The table goes to stdout and, with --out,
to a Markdown file with the machine and commit.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

_CHILD = r"""
import sys, time, json
import torch, hybrid_trt
from examples.models import build
mode, model_name, arg = sys.argv[1], sys.argv[2], sys.argv[3]
torch.manual_seed(0)
model, x = build(model_name)
with torch.no_grad():
    t0 = time.perf_counter()
    if mode == "load":
        fn = hybrid_trt.load(arg)
    elif mode == "hybrid_trt":
        fn = torch.compile(model, backend="hybrid_trt", options={"cache_dir": arg})
    else:
        fn = torch.compile(model)
    out = fn(x)
    t1 = time.perf_counter()
    expected = model(x)
err = float((out - expected).abs().max())
print("RESULT" + json.dumps({"seconds": t1 - t0, "wall_at_output": time.time(), "max_abs_err": err}))
"""


def _child(mode: str, model: str, arg: str, cache: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCHINDUCTOR_CACHE_DIR": cache}
    env.pop("HYBRID_TRT_CACHE_DIR", None)
    launched = time.time()
    done = subprocess.run([sys.executable, "-c", _CHILD, mode, model, arg], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} process failed:\n{done.stderr[-3000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT"))
    result = json.loads(line[len("RESULT"):])
    result["launch_to_output"] = result.pop("wall_at_output") - launched
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--inductor", action="store_true", help="also time plain torch.compile (Inductor) cold")
    parser.add_argument("--package", help="an already exported package of --model (skips the export)")
    parser.add_argument("--out", help="write the Markdown table here")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch
    import hybrid_trt
    from examples.models import build

    work = pathlib.Path(tempfile.mkdtemp(prefix="bench_load_"))
    package = args.package
    export_s = None
    if package is None:
        torch.manual_seed(0)
        model, x = build(args.model)
        t0 = time.perf_counter()
        package = str(hybrid_trt.export(model, (x,), path=work / "package"))
        export_s = time.perf_counter() - t0
        print(f"exported {args.model} to {package} in {export_s:.1f} s", file=sys.stderr)
    modes = ["hybrid_trt", "load"] + (["inductor"] if args.inductor else [])
    runs: dict = {m: [] for m in modes}
    for r in range(args.repeats):
        for mode in modes:
            cache = tempfile.mkdtemp(prefix=f"{mode}_inductor_", dir=work)
            arg = package if mode == "load" else tempfile.mkdtemp(prefix="engines_", dir=work)
            result = _child(mode, args.model, arg, cache)
            runs[mode].append(result)
            print(f"repeat {r} {mode}: {result['seconds']:.2f} s to first output in process, "
                  f"{result['launch_to_output']:.2f} s from launch (max abs err {result['max_abs_err']:.2g})",
                  file=sys.stderr)
    med = {m: {k: statistics.median(x[k] for x in runs[m]) for k in ("seconds", "launch_to_output")}
           for m in modes}
    ratio = med["load"]["seconds"] / med["hybrid_trt"]["seconds"]
    ratio_launch = med["load"]["launch_to_output"] / med["hybrid_trt"]["launch_to_output"]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    names = {"hybrid_trt": "torch.compile(backend=\"hybrid_trt\"), cold caches", "load": "hybrid_trt.load(package)",
             "inductor": "torch.compile() (Inductor), cold cache"}
    lines = [
        f"# Load time vs cold compile: {args.model}",
        "",
        f"Machine: {platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads); commit {commit}; "
        f"`benchmarks/bench_load.py --repeats {args.repeats}`; median of {args.repeats} fresh processes each.",
        "",
        "| path | first output, in process (s) | launch to first output (s) |",
        "|---|---|---|",
    ]
    for m in modes:
        lines.append(f"| {names[m]} | {med[m]['seconds']:.2f} | {med[m]['launch_to_output']:.2f} |")
    lines += ["", f"load / hybrid_trt cold compile: **{ratio:.1%}** in process (target <= 20%), "
              f"{ratio_launch:.1%} launch to first output (imports included on both sides)."]
    if export_s is not None:
        lines.append(f"Export of the package (once, ahead of time): {export_s:.1f} s.")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text)
    return 0 if ratio <= 0.2 else 1


if __name__ == "__main__":
    sys.exit(main())
