"""Why ONNX Runtime on the whole exported model beats the same model as hybrid_trt's delegated partition (CUDA).

cudagraphs_h100.md (session 36) left it untraced: at fp32 batch 16, ORT's whole-model session with its own CUDA
graph was faster than Inductor `reduce-overhead`, while placement measured hybrid_trt's partition of the same model
no faster than Inductor by its margin and kept Inductor. This probe separates the two things that differ:

- the graph: ``torch.onnx.export``'s ONNX against hybrid_trt's lowering of the partition (captured at the session
  hybrid_trt's delegate creates, ``placement="delegate"``, no cache);
- the session: the provider options hybrid_trt's delegate passed against the benchmark's (`use_tf32` off, a
  stream of its own).

Each (graph, options) session is IO-bound to static device buffers and timed in rotating rounds in one process
(CUDA events around ``--iters`` runs; ``run_with_iobinding`` ends with the provider's stream sync), with and
without ONNX Runtime's own CUDA graph. A profile of 20 runs per graph gives device time by kernel (torch.profiler), and the optimized
graphs' op counts are printed.

    python3 benchmarks/probe_ort_whole_vs_partition_cuda.py [--models resnet50,resnet18] [--batch 16]
        [--dtype fp32] [--rounds 7] [--iters 20] [--out FILE]
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _capture_partitions(model, x):
    """hybrid_trt's delegated partitions of ``model`` at ``x``: (ONNX bytes, providers) of each session built."""
    import hybrid_trt
    captured, real = [], ort.InferenceSession

    def spy(model_bytes, so=None, providers=None, **kw):
        captured.append((model_bytes, providers))
        return real(model_bytes, so, providers=providers, **kw)
    ort.InferenceSession = spy
    try:
        with torch.no_grad():
            fn = torch.compile(model, backend="hybrid_trt", options={"placement": "delegate", "cache": False})
            fn(x)
    finally:
        ort.InferenceSession = real
    return captured, hybrid_trt.last_report()


def _session(model_bytes, cuda_opts, cuda_graph, optimized=None):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if optimized:
        so.optimized_model_filepath = optimized
    opts = dict(cuda_opts)
    if cuda_graph:
        opts["enable_cuda_graph"] = "1"
    return ort.InferenceSession(model_bytes, so, providers=[("CUDAExecutionProvider", opts)])


_NP = {torch.float32: np.float32, torch.float16: np.float16}


def _bound(sess, x):
    """An IO binding of ``sess`` to static buffers (input filled with ``x``; outputs at the model's static
    shapes, bound once: ONNX Runtime's CUDA graph replays into the addresses it captured), and a run function."""
    inp = sess.get_inputs()
    if len(inp) != 1:
        raise RuntimeError(f"expected one input, got {[i.name for i in inp]}")
    xs = x.clone()
    dev = torch.cuda.current_device()
    b = sess.io_binding()
    b.bind_input(inp[0].name, "cuda", dev, _NP[x.dtype], list(x.shape), xs.data_ptr())
    keep = []
    for o in sess.get_outputs():
        if not all(isinstance(d, int) for d in o.shape):
            raise RuntimeError(f"output {o.name} has no static shape: {o.shape}")
        keep.append(torch.empty(tuple(o.shape), dtype=x.dtype, device="cuda"))
        b.bind_output(o.name, "cuda", dev, _NP[x.dtype], list(o.shape), keep[-1].data_ptr())
    sess.run_with_iobinding(b)  # first run (ORT captures its graph here when asked)
    return (lambda: sess.run_with_iobinding(b)), keep


def _time(run, iters):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        run()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def _op_counts(path):
    m = onnx.load(path, load_external_data=False)
    return collections.Counter(f"{n.domain + ':' if n.domain else ''}{n.op_type}" for n in m.graph.node)


def _kernels(run, n):
    """Device time by CUDA kernel over ``n`` runs (torch.profiler's CUPTI sees ONNX Runtime's kernels too)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            run()
        torch.cuda.synchronize()
    by = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            by[e.name[:60]] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    return by


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet50,resnet18")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "fp16"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = torch.float16 if args.dtype == "fp16" else torch.float32
    lines = [f"# ORT whole export against hybrid_trt's partition, {torch.cuda.get_device_name()}, "
             f"{args.dtype} batch {args.batch}",
             f"torch {torch.__version__}, onnxruntime {ort.__version__}, onnx {onnx.__version__}; "
             f"median of {args.rounds} rounds x {args.iters} runs, ms (CUDA events)", ""]
    tmp = tempfile.mkdtemp()
    for name in args.models.split(","):
        torch.manual_seed(0)
        model = torchvision.models.get_model(name, weights=None).eval().cuda().to(dtype)
        x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=dtype)
        whole_path = os.path.join(tmp, f"{name}_whole.onnx")
        torch.onnx.export(model, (x,), whole_path, dynamo=False, opset_version=17)
        whole = open(whole_path, "rb").read()
        parts, rep = _capture_partitions(model, x)
        cuda_parts = [(b, p) for b, p in parts if p and isinstance(p[0], tuple) and p[0][0] == "CUDAExecutionProvider"]
        lines.append(f"## {name}: {len(cuda_parts)} CUDA partition session(s); report: "
                     f"{rep.delegated_op_count}/{rep.total_op_count} ops delegated")
        if len(cuda_parts) != 1:
            lines.append(f"skipped: the probe needs the model delegated as one partition ({len(cuda_parts)})")
            continue
        part_bytes, providers = cuda_parts[-1]
        ours = {k: v for k, v in providers[0][1].items() if k != "user_compute_stream"}
        bench = {"device_id": str(torch.cuda.current_device()), "use_tf32": "0"}
        lines.append(f"hybrid_trt's CUDA provider options: {ours}; the benchmark's: {bench}")
        stream = torch.cuda.Stream()
        variants = {}
        for graph_name, graph in (("whole", whole), ("partition", part_bytes)):
            for opt_name, opts in (("bench opts", bench), ("our opts", ours)):
                for cg in (False, True):
                    o = dict(opts, user_compute_stream=str(stream.cuda_stream))
                    sess = _session(graph, o, cg)
                    variants[f"{graph_name} / {opt_name}{' / ORT CG' if cg else ''}"] = _bound(sess, x)
        ref = None
        for label, (run, keep) in variants.items():
            run()
            torch.cuda.synchronize()
            if ref is None:
                ref = keep
            err = max(float((a.float() - b.float()).abs().max()) for a, b in zip(keep, ref))
            lines.append(f"- {label}: max |diff| to the first variant {err:.2e}")
        times = collections.defaultdict(list)
        labels = list(variants)
        for r in range(args.rounds):
            for label in labels[r % len(labels):] + labels[:r % len(labels)]:
                times[label].append(_time(variants[label][0], args.iters))
        lines += ["", "| graph / options | ms | vs whole / bench opts |", "|---|---|---|"]
        base = statistics.median(times[labels[0]])
        for label in labels:
            m = statistics.median(times[label])
            lines.append(f"| {label} | {m:.3f} | {m / base:.3f} |")
        for graph_name, graph in (("whole", whole), ("partition", part_bytes)):
            opt_path = os.path.join(tmp, f"{name}_{graph_name}_opt.onnx")
            sess = _session(graph, dict(bench, user_compute_stream=str(stream.cuda_stream)), False, optimized=opt_path)
            run, _ = _bound(sess, x)
            by = _kernels(run, 20)
            total = sum(by.values())
            lines.append(f"\n{graph_name}: optimized graph ops {dict(_op_counts(opt_path).most_common())}")
            lines.append(f"{graph_name}: device time by kernel over 20 runs (us): total {total:.0f}; "
                         + "; ".join(f"{k} {v:.0f}" for k, v in by.most_common(14)))
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
