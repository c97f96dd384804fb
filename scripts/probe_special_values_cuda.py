"""Session 43: the lowerings changed for special values (sign at NaN, float remainder, x ** 0.5, int64 sums past
2**53, integer floor/trunc division in int64), compiled at min_block_size=1 on CUDA (onnxruntime-gpu's CUDA
provider), each compared with eager on the same device. The CPU side is tests/test_lowerings.py's
test_special_values_match_eager; this covers what that test cannot: the CUDA provider's kernels.

    PYTHONPATH=/tmp/site:$PWD python3 scripts/probe_special_values_cuda.py

placement="delegate": on a GPU the default placement is measured, and it kept these one-op graphs on Inductor
(session 44's first run: "delegated partitions 0", and Inductor's own answers differ from eager's for remainder
and x ** -0.5 on these grids), so that run tested nothing of ours.

Session 44, an H100 (tree cea3a6a, onnxruntime-gpu 1.31.1's CUDA provider): all 11 cases ok, each one delegated
partition (output in benchmarks/results/cudagraphs_h100.md, session 44).
"""
import logging

import torch

import hybrid_trt

logging.getLogger("hybrid_trt").setLevel(logging.ERROR)
INF, NAN = float("inf"), float("nan")
dev = torch.device("cuda")
f = torch.tensor([NAN, INF, -INF, -0.0, 0.0, -1.5, 2.5, 1e30, -1e30, 0.5, -0.5, 3.0, -7.0, 1.0], device=dev)
a, b = f[:, None].expand(14, 14).contiguous(), f[None, :].expand(14, 14).contiguous()
big = torch.tensor([2 ** 60 + 3, -(2 ** 60) - 3, 2 ** 53 + 1, -7, 7, 2 ** 63 - 1, -(2 ** 63) + 5, -(2 ** 63)], device=dev)
den = torch.tensor([7, 7, 2, 2, -2, 3, -3, -1], device=dev)
den_trunc = torch.tensor([7, 7, 2, 2, -2, 3, -3, 1], device=dev)
keys = torch.tensor([[2 ** 53 + 1, 2, 0, -7], [2 ** 60 + 3, 5, 1, 2 ** 62], [2 ** 63 - 1, 1, 2 ** 62, 9]], device=dev)
CASES = {
    "sign": (lambda x: torch.sign(x) * 1, (a,)),
    "remainder": (lambda x, y: torch.remainder(x, y) * 1, (a, b)),
    "pow_0.5": (lambda x: x ** 0.5 + 0, (a,)),
    "pow_-0.5": (lambda x: x ** -0.5 + 0, (a,)),
    "sum_int64_rows": (lambda k: k.sum(1) + 1, (keys,)),
    "sum_int64_all": (lambda k: k.sum() + 1, (keys,)),
    "sum_int64_keepdim": (lambda k: k.reshape(2, 3, 2).sum((0, 2), keepdim=True) + 1, (keys,)),
    "floor_div_tensor": (lambda x, y: torch.div(x, y, rounding_mode="floor") + 0, (big, den)),
    "trunc_div_tensor": (lambda x, y: torch.div(x, y, rounding_mode="trunc") + 0, (big, den_trunc)),
    "floor_div_number": (lambda x: x // 7 + 0, (big,)),
    "floor_div_int32": (lambda x, y: torch.div(x, y, rounding_mode="floor") + 0,
                        (torch.arange(-20, 20, device=dev, dtype=torch.int32),
                         torch.tensor([3, -3, 7, -7], device=dev, dtype=torch.int32).repeat(10))),
}
for name, (fn, args) in CASES.items():
    torch._dynamo.reset()
    before = len(hybrid_trt.reports())
    try:
        with torch.no_grad():
            expected = fn(*args)
            options = {"min_block_size": 1, "placement": "delegate"}
            got = torch.compile(fn, backend="hybrid_trt", options=options)(*args)
        delegated = sum(p.status == "delegated" for r in hybrid_trt.reports()[before:] for p in r.partitions)
        same = expected.dtype == got.dtype and expected.shape == got.shape and bool(
            torch.equal(expected, got) if not expected.is_floating_point()
            else torch.allclose(expected, got, rtol=1e-5, atol=1e-6, equal_nan=True))
        print(f"{name}: {'ok' if same else 'MISMATCH'} (delegated partitions {delegated})"
              + ("" if same else f" eager {expected.flatten()[:6].tolist()} hybrid {got.flatten()[:6].tolist()}"),
              flush=True)
    except Exception as e:  # noqa: BLE001 - a probe: report and go on
        print(f"{name}: ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)
