"""ONNX Runtime's own view of the partitions hybrid_trt delegates to it, for
examples/lidar_detector.py (realistic, fp16, CUDA): each partition's ONNX
model, ONNX Runtime's node placement log and its per-node profile (which
provider ran each node, and any Memcpy nodes it inserted at run time).

    python benchmarks/profile_ort_partitions.py OUT_DIR [--cpu]

A diagnostic: it wraps the delegate's build to turn ONNX Runtime's profiling
and verbose logging on, which the product never does.
"""

from __future__ import annotations

import collections
import json
import pathlib
import sys

import onnx
import onnxruntime as ort
import torch

import bench_sparse as bs


def main() -> int:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    sessions = []
    real_session = ort.InferenceSession

    def profiled_session(model_bytes, so, providers):
        k = len(sessions)
        onnx.save(onnx.load_from_string(model_bytes), out / f"partition{k}.onnx")
        so.enable_profiling = True
        so.profile_file_prefix = str(out / f"ort_profile{k}")
        so.log_severity_level = 0
        session = real_session(model_bytes, so, providers=providers)
        sessions.append(session)
        return session

    ort.InferenceSession = profiled_session
    # --cpu: the small config in float32 on the CPU, to try the script without a GPU.
    cpu = "--cpu" in sys.argv
    config, device, dtype = ("small", "cpu", torch.float32) if cpu else ("realistic", "cuda", torch.float16)
    model = bs.lidar_detector.build_model(config).to(device, dtype).eval()
    feats, coords = bs.lidar_detector.make_inputs(config, device, dtype, seed=0)
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    with torch.inference_mode():
        fn = torch.compile(model, backend="hybrid_trt", fullgraph=True)
        for _ in range(5):
            fn(feats, coords)
        if device == "cuda":
            torch.cuda.synchronize()
    ort.InferenceSession = real_session
    for k, session in enumerate(sessions):
        path = session.end_profiling()
        events = json.loads(pathlib.Path(path).read_text())
        by_provider = collections.Counter()
        memcpy = collections.Counter()
        for e in events:
            args = e.get("args", {})
            if e.get("cat") == "Node" and "provider" in args:
                by_provider[args["provider"]] += 1
                if "Memcpy" in args.get("op_name", "") or "Memcpy" in e.get("name", ""):
                    memcpy[(e["name"], args.get("provider"))] += e.get("dur", 0)
        print(f"partition {k}: inputs {[(i.name, i.type, i.shape) for i in session.get_inputs()]}")
        print(f"  node runs by provider: {dict(by_provider)}")
        print(f"  memcpy nodes (total us): {dict(memcpy)}")
        slow = sorted((e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")),
                      key=lambda e: -e.get("dur", 0))[:8]
        for e in slow:
            print(f"    {e['dur']:>8} us  {e['name']}  {e['args'].get('op_name')}  {e['args'].get('provider')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
