"""Why measured placement keeps the LiDAR example's dense partition on ONNX Runtime although the whole model runs
faster with it on Inductor (session 12: hybrid 1.07-1.08x Inductor, hybrid with no delegate 1.01-1.02x).

Wraps placement._time_pair: besides its verdict, each side of the partition is timed by wall time (synchronised),
host time (launch to return) and device time (kernels back to back), and Inductor's side is profiled. GPU only.

    python3 scripts/lidar_placement_probe.py
"""
import statistics
import sys
import time

import torch

sys.path.insert(0, "examples")
sys.path.insert(0, "benchmarks")
import lidar_detector  # noqa: E402

import hybrid_trt  # noqa: E402
from hybrid_trt import placement, timing  # noqa: E402

original = placement._time_pair


def _host_ms(fn, device, n=30):
    out = []
    for _ in range(n):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize(device)
    return statistics.median(out)


def probed(delegate, inductor, device, delegate_timing, inductor_timing):
    result = original(delegate, inductor, device, delegate_timing, inductor_timing)
    sync = lambda: torch.cuda.synchronize(device)  # noqa: E731
    for name, fn in (("delegate", delegate), ("inductor", inductor)):
        if fn is None:
            continue
        wall = statistics.median(timing.wall_sampler(sync)(fn) for _ in range(30))
        host = _host_ms(fn, device)
        dev_sample = timing.device_sampler(max(host, wall) * 2, device)
        dev = statistics.median(dev_sample(fn) for _ in range(30))
        print(f"PROBE {name}: wall {wall:.3f} ms, host {host:.3f} ms, device {dev:.3f} ms", flush=True)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    for name, fn in (("inductor", inductor), ("delegate", delegate)):
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(10):
                fn()
            sync()
        print(f"PROBE profile {name} (10 calls)")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=60))
    return result


placement._time_pair = probed
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
model = lidar_detector.build_model("realistic").to("cuda", torch.float16).eval()
feats, coords = lidar_detector.make_inputs("realistic", "cuda", torch.float16, seed=0)
torch._dynamo.config.capture_dynamic_output_shape_ops = True
with torch.inference_mode():
    fn = torch.compile(model, backend="hybrid_trt", fullgraph=True, options={"cache": False})
    fn(feats, coords)
    print(hybrid_trt.last_report().table())
