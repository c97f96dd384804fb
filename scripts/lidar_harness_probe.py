"""Why bench_cudagraphs.py and bench_sparse.py timed the LiDAR example's hybrid_trt compile 2x apart (10.90 against
5.79 ms, same config, same session; issue 10). Run on the GPU machine:

    python3 scripts/lidar_harness_probe.py

One process, the realistic config in fp16, inference_mode. Steps, each printing median ms per call:
  A  hybrid_trt alone after torch._dynamo.reset() (as bench_sparse.py), timed with events and with wall+sync;
  B  the same compiled callable timed again after Inductor and hybrid_trt-with-CUDA-graphs compiles of the same
     model object were added without a reset (as bench_cudagraphs.py does), and those timed too;
  C  a second plain hybrid_trt compile added without a reset (fresh callable, same model object), timed;
  D  with placement="measured" after a reset (the placement verdicts in its report).
The differences between A, B and C locate the cost: the compiled code itself, or the harness around it.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import hybrid_trt  # noqa: E402
from examples import lidar_detector  # noqa: E402


def events_ms(fn, iters=30):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return statistics.median(out)


def wall_ms(fn, iters=30):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def main():
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    model = lidar_detector.build_model("realistic").to("cuda", torch.float16)
    feats, coords = lidar_detector.make_inputs("realistic", "cuda", torch.float16, seed=0)
    with torch.inference_mode():
        expected = model(feats, coords)
        call = lambda f: (lambda: f(feats, coords))  # noqa: E731
        print(f"PROBE eager events {events_ms(call(model)):.3f} wall {wall_ms(call(model)):.3f}", flush=True)

        torch._dynamo.reset()
        hybrid = torch.compile(model, backend="hybrid_trt", fullgraph=True)
        lidar_detector.compare_detections(expected, hybrid(feats, coords), atol=2e-2, rtol=2e-2)
        print(hybrid_trt.last_report().table(), flush=True)
        print(f"PROBE A hybrid alone: events {events_ms(call(hybrid)):.3f} wall {wall_ms(call(hybrid)):.3f}",
              flush=True)

        inductor = torch.compile(model, backend="inductor", fullgraph=True)
        inductor(feats, coords)
        hybrid_cg = torch.compile(model, backend="hybrid_trt", mode="reduce-overhead", fullgraph=True)
        hybrid_cg(feats, coords)
        print(f"PROBE B inductor {wall_ms(call(inductor)):.3f} hybrid_cg {wall_ms(call(hybrid_cg)):.3f} "
              f"hybrid (same callable as A) {wall_ms(call(hybrid)):.3f}", flush=True)

        hybrid2 = torch.compile(model, backend="hybrid_trt", fullgraph=True)
        hybrid2(feats, coords)
        print(f"PROBE C second hybrid compile, no reset: wall {wall_ms(call(hybrid2)):.3f}; "
              f"first again {wall_ms(call(hybrid)):.3f}", flush=True)

        torch._dynamo.reset()
        inductor = torch.compile(model, backend="inductor", fullgraph=True)
        inductor(feats, coords)
        measured = torch.compile(model, backend="hybrid_trt", fullgraph=True, options={"placement": "measured"})
        lidar_detector.compare_detections(expected, measured(feats, coords), atol=2e-2, rtol=2e-2)
        print(hybrid_trt.last_report().table(), flush=True)
        print(f"PROBE D after reset: inductor {wall_ms(call(inductor)):.3f} hybrid measured placement "
              f"{wall_ms(call(measured)):.3f}", flush=True)


if __name__ == "__main__":
    main()
