"""Whether a failed torch.cuda.graph capture leaves the default CUDA generator captured (later random ops fail),
and whether installing a fresh copy of its state (whole_graph._release_generator) repairs it. GPU only."""
import torch

from hybrid_trt.whole_graph import _release_generator


def failed_capture():
    g = torch.cuda.CUDAGraph()
    x = torch.ones(4, device="cuda")
    try:
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            y = x * 2
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    return "no failure"


def randn_works():
    try:
        torch.randn(3, device="cuda")
        return "randn ok"
    except Exception as e:  # noqa: BLE001
        return f"randn fails: {str(e).splitlines()[0][:100]}"


print("capture:", failed_capture())
print("before repair:", randn_works())
_release_generator(torch.device("cuda"))
print("after repair:", randn_works())
