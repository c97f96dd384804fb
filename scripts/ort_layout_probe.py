"""Probe (GPU): ONNX Runtime's CUDA provider with its convolutions NCHW (the default) against channels-last
(``prefer_nhwc=1``), whole torchvision models, fp16 and fp32, batch 1 and 16, each run under ONNX Runtime's own
CUDA graph (so the kernels are what is timed). Decides ``onnxruntime_cuda_layout="auto"`` from data.

    python3 scripts/ort_layout_probe.py [--models a,b] [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def _session(path, nhwc: bool, stream):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    opts = {"device_id": "0", "use_tf32": "0", "prefer_nhwc": str(int(nhwc)), "enable_cuda_graph": "1",
            "user_compute_stream": str(stream.cuda_stream)}
    return ort.InferenceSession(path, so, providers=[("CUDAExecutionProvider", opts)])


def _bound(sess, x, out_shape, dtype):
    import numpy as np
    import torch
    npd = {torch.float16: np.float16, torch.float32: np.float32}[dtype]
    xs, ys = x.clone(), torch.empty(out_shape, dtype=dtype, device="cuda")
    b = sess.io_binding()
    b.bind_input(sess.get_inputs()[0].name, "cuda", 0, npd, list(xs.shape), xs.data_ptr())
    b.bind_output(sess.get_outputs()[0].name, "cuda", 0, npd, list(ys.shape), ys.data_ptr())
    return xs, ys, b


def _time(fn, sync, n=60, rounds=5):
    for _ in range(5):
        fn()
    sync()
    meds = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        meds.append((time.perf_counter() - t0) / n * 1e3)
    return statistics.median(meds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v3_large,efficientnet_b0,convnext_tiny")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch
    import torchvision
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = ["| model | dtype | batch | ORT CG NCHW ms | ORT CG NHWC ms | NHWC / NCHW | max abs diff NHWC vs NCHW |",
            "|---|---|---|---|---|---|---|"]
    tmp = tempfile.mkdtemp(prefix="ort_layout_")
    for name in args.models.split(","):
        for dtype in (torch.float16, torch.float32):
            torch.manual_seed(0)
            model = torchvision.models.get_model(name, weights=None).eval().cuda().to(dtype)
            path = os.path.join(tmp, f"{name}_{dtype}.onnx")
            x0 = torch.randn(1, 3, 224, 224, device="cuda", dtype=dtype)
            try:
                with torch.no_grad():
                    torch.onnx.export(model, (x0,), path, dynamo=False, opset_version=17, input_names=["x"],
                                      output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
            except Exception as e:  # noqa: BLE001
                rows.append(f"| {name} | {dtype} | - | export failed: {type(e).__name__}: {str(e)[:100]} |")
                continue
            for batch in (int(b) for b in args.batches.split(",")):
                x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype)
                with torch.no_grad():
                    out_shape = model(x).shape
                res, outs = {}, {}
                for nhwc in (False, True):
                    stream = torch.cuda.Stream()
                    try:
                        sess = _session(path, nhwc, stream)
                        xs, ys, b = _bound(sess, x, out_shape, dtype)

                        def run():
                            sess.run_with_iobinding(b)
                        torch.cuda.synchronize()
                        res[nhwc] = _time(run, torch.cuda.synchronize)
                        outs[nhwc] = ys.clone()
                    except Exception as e:  # noqa: BLE001
                        res[nhwc] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
                    finally:
                        sess = b = None
                ok = all(isinstance(v, float) for v in res.values())
                diff = float((outs[True].float() - outs[False].float()).abs().max()) if ok else float("nan")
                ratio = f"{res[True] / res[False]:.2f}" if ok else "-"
                fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else v  # noqa: E731
                line = f"| {name} | {str(dtype)[6:]} | {batch} | {fmt(res[False])} | {fmt(res[True])} | {ratio} | {diff:.2e} |"
                rows.append(line)
                print(line, flush=True)
    import onnxruntime as ort
    text = (f"torch {torch.__version__}, onnxruntime {ort.__version__}, {torch.cuda.get_device_name()}, TF32 off\n\n"
            + "\n".join(rows) + "\n")
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    sys.exit(main())
