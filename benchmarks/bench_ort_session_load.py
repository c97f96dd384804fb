"""ONNX Runtime session creation: from the lowered model (graph optimization at ORT_ENABLE_ALL, what a build
does) against from the stored optimized model (ORT_DISABLE_ALL, what a load from the engine store does).

ResNet-18 is compiled once by hybrid_trt into a temporary engine store; its entry holds both forms. Sessions are
then created from each form, alternating, with the delegate's own session code; both are checked to give the
same output.

    .venv/bin/python benchmarks/bench_ort_session_load.py [--model resnet18] [--repeats 10]
"""
from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_ort_load_") as tmp:
        os.environ["HYBRID_TRT_CACHE_DIR"] = tmp
        import torch
        import hybrid_trt
        from examples.models import build
        from hybrid_trt.delegates import get_delegate
        from hybrid_trt.engines.store import EngineStore
        torch.set_num_threads(args.threads)
        torch.manual_seed(0)
        model, x = build(args.model)
        with torch.no_grad():
            torch.compile(model, backend="hybrid_trt", options={"num_threads": args.threads})(x)
        report = hybrid_trt.last_report()
        part = max(report.partitions, key=lambda p: p.op_count)
        entry = EngineStore(tmp).get(part.key)
        delegate = get_delegate("onnxruntime")
        options = entry.meta["delegate_options"]
        lowered, optimized = entry.files["engine.model.onnx"], entry.files["engine.optimized.onnx"]
        device = torch.device("cpu")
        forms = {"lowered (ORT_ENABLE_ALL)": dict(model_bytes=lowered, optimize=True),
                 "stored optimized (ORT_DISABLE_ALL)": dict(model_bytes=optimized, optimize=False)}
        times = {name: [] for name in forms}
        outputs = {}
        for _ in range(args.repeats):
            for name, kw in forms.items():
                t0 = time.perf_counter()
                session, _stream = delegate.session(kw["model_bytes"], device, options, optimize=kw["optimize"])
                times[name].append(time.perf_counter() - t0)
                feed = {session.get_inputs()[0].name: x.numpy()}
                outputs[name] = session.run(None, feed)[0]
        a, b = outputs.values()
        same = bool(abs(a - b).max() <= 1e-4 * max(1.0, abs(a).max()))
    from bench_models import machine
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"Machine: {machine()}; commit {commit}; {args.model} partition {part.index} ({part.op_count} ops), "
          f"lowered {len(lowered) / 1e6:.1f} MB, optimized {len(optimized) / 1e6:.1f} MB; {args.repeats} "
          f"alternating repeats; outputs equal: {same}\n")
    print("| session from | median s | min s |")
    print("|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.3f} | {min(ts):.3f} |")
    base, stored = (statistics.median(ts) for ts in times.values())
    print(f"\nstored optimized / lowered: {stored / base:.2f}")


if __name__ == "__main__":
    main()
