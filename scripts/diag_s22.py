"""Diagnostics of the two CUDA float16 BEV defects (tests/test_lowerings.py `_bev_settings`), for a GPU stage: prints
each partition's FX graph, output metas and ONNX output types, and the stack where any guard with a division or a
float is added. `whole`: the block once; `bounded`: over a bounded point count. Without CUDA it runs on the CPU as
if the nodes were on CUDA (float16 scatters then fail in the CPU provider at run time)."""
import sys, traceback, torch
sys.path.insert(0, "tests")
import hybrid_trt
from hybrid_trt.engines import runtime
from hybrid_trt.delegates import onnxruntime_delegate
from torch.fx.experimental import symbolic_shapes as ss
from test_lowerings import _PointsToBEV, _bev_args

orig_lower = runtime._lower
def lower(module, shapes, dtypes, sizes, target):
    print("=== partition graph", shapes, dtypes, sizes, target)
    for n in module.graph.nodes:
        v = n.meta.get("val")
        print("  ", n.format_node(), "|", getattr(v, "dtype", None), getattr(v, "device", None))
    model, metas = orig_lower(module, shapes, dtypes, sizes, target)
    print("=== out metas", [(tuple(m.shape), m.dtype) for m in metas])
    print("=== onnx outputs", [(o.name, o.type.tensor_type.elem_type) for o in model.graph.output])
    return model, metas
runtime._lower = lower

orig_log = ss.ShapeEnv._log_guard
def log_guard(self, prefix, g, forcing_spec):
    if "/" in str(g) or "." in str(g):
        print("=== GUARD", prefix, g)
        print("".join(traceback.format_stack(limit=60)))
    return orig_log(self, prefix, g, forcing_spec)
ss.ShapeEnv._log_guard = log_guard

for which in sys.argv[1:]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    onnxruntime_delegate.SLOW_ON_CPU = frozenset()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cpu":
        onnxruntime_delegate._on_cuda = lambda n: True
    model = _PointsToBEV().eval().to(dev, torch.float16)
    print("########", which, dev)
    try:
        compiled = torch.compile(model, backend="hybrid_trt", options={"strict": True, "cache": False})
        with torch.no_grad():
            for n in ((40,) if which == "whole" else (40, 57, 33)):
                args = _bev_args(n, dev, torch.float16)
                if which == "bounded" and n == 40:
                    torch._dynamo.mark_dynamic(args[0], 0, min=2, max=5000)
                    torch._dynamo.mark_dynamic(args[1], 0, min=2, max=5000)
                got, want = compiled(*args), model(*args)
                print("dtypes got", [t.dtype for t in got], "want", [t.dtype for t in want])
        print(hybrid_trt.last_report().table())
    except Exception:
        traceback.print_exc()
