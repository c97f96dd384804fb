"""The host part of a whole-runner call (hybrid_trt/whole_graph.py), default guards against README "Per-call
cost"'s recipe, on any machine: Dynamo's frame, the weights' pointer check, the input copy and the output copies,
with the replay replaced by nothing (no GPU needed; the graph's own work is not in these figures).

    python benchmarks/probe_whole_runner_host.py [--models mobilenet_v3_large,efficientnet_b0] [--calls 3000]

Each model (torchvision, random weights, 1x3x32x32 float32) is compiled with a backend that wraps Dynamo's graph in
``WholeGraph`` exactly as hybrid_trt's backend does (its weights, Dynamo's static inputs, as the runner's static
arguments); the capture is a stand-in that records the buffers and outputs and whose replay does nothing. Prints
the median wall time of a call after warm-up, and how many arguments Dynamo's frame passes.

    python benchmarks/probe_whole_runner_host.py --baseline OLD_whole_graph.py [--calls 10000]

times the runner's own replay path alone (312 weights pointer-checked, one input copied, the stand-in replay)
for this tree's ``whole_graph.py`` against an older copy of the file (``git show REV:hybrid_trt/whole_graph.py``),
in interleaved rounds of one process.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_RECIPE = {"use_recursive_dict_tags_for_guards": True, "install_free_tensors": True}


class _NoReplay:
    def replay(self):
        pass


def _stand_in(whole_graph) -> None:
    """``whole_graph``'s capture replaced by one that records the buffers and outputs; its replay does nothing."""
    def capture(fn, call_args, copied, static):
        full = list(call_args)
        inputs = []
        for i in copied:
            full[i] = call_args[i].clone()
            inputs.append(full[i])
        outputs = [t.clone() for t in fn(*full)]
        ptrs = [None] * len(call_args)
        for i in static:
            ptrs[i] = call_args[i].data_ptr()
        return whole_graph._Captured(_NoReplay(), inputs, outputs, ptrs, list)
    whole_graph._capture, whole_graph._CAPTURE_DEVICE = capture, "cpu"


def _runner_ab(baseline: str, calls: int) -> None:
    import torch
    from hybrid_trt import whole_graph
    spec = importlib.util.spec_from_file_location("hybrid_trt.whole_graph_baseline", baseline)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    weights, x = [torch.randn(8) for _ in range(312)], torch.randn(1, 1000)
    fns = {}
    for label, module in (("baseline", old), ("this tree", whole_graph)):
        _stand_in(module)
        runner = module.WholeGraph(lambda a, *w: [a * 2], static=list(range(1, 313)), name=label,
                                   on_fallback=lambda *a: None)
        for _ in range(3):  # warm-up, capture, one replay
            runner(x, *weights)
        fns[label] = (lambda r: lambda: r(x, *weights))(runner)
    times = {k: [] for k in fns}
    for _ in range(20):
        for k, f in fns.items():
            for _ in range(calls // 20):
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; "
          f"the runner's replay path alone, median of {calls} calls, baseline {baseline}")
    for k, v in times.items():
        print(f"| {k} | {statistics.median(v) * 1e6:.2f} us |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="mobilenet_v3_large,efficientnet_b0")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--baseline", default=None, help="an older whole_graph.py: time the runner alone against it")
    args = ap.parse_args()
    if args.baseline:
        return _runner_ab(args.baseline, args.calls)
    import torch
    import torchvision
    from hybrid_trt import whole_graph
    from hybrid_trt.capture import weight_input_indices
    _stand_in(whole_graph)
    passed = {}

    def backend(gm, example_inputs):
        passed["n"] = len(example_inputs)
        return whole_graph.WholeGraph(gm.forward, sorted(weight_input_indices(example_inputs)), "probe",
                                      lambda *a: None)

    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; "
          f"median of {args.calls} calls")
    print("| model | guards | frame arguments | host us per call |")
    print("|---|---|---|---|")
    for name in args.models.split(","):
        model = torchvision.models.get_model(name, weights=None).eval()
        x = torch.randn(1, 3, 32, 32)
        for label, patch in (("default", {}), ("recipe", _RECIPE)):
            torch._dynamo.reset()
            compiled = torch.compile(model, backend=backend)
            with torch.no_grad():
                with torch._dynamo.config.patch(patch):
                    compiled(x)
                for _ in range(5):
                    compiled(x)
                times = []
                for _ in range(args.calls):
                    t0 = time.perf_counter()
                    compiled(x)
                    times.append(time.perf_counter() - t0)
            print(f"| {name} | {label} | {passed['n']} | {statistics.median(times) * 1e6:.1f} |")


if __name__ == "__main__":
    main()
