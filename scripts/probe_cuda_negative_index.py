"""What a delegated gather does on the CUDA provider with an index out of range (README, 'Fallbacks'): ONNX
Runtime's CUDA gather kernel cannot raise. Run on a GPU machine with onnxruntime-gpu; prints one line per op.

Session 35, H100, tree e2da139 with this script (`gpu_stage_env` of scripts/gpu_stage_env.sh): for each op the
in-range call matched eager and index -1 gave the last row ([73, 75, 77, 79]) with 0 ops delegated: placement
(measured on a GPU) kept the graph on Inductor, whose CUDA code reads a negative index from the end; eager asserts.
That run used its own copy of the model, without the ReLU, which changes nothing for a non-negative table."""
import os
import sys

import torch

import hybrid_trt  # noqa: F401 - registers the backend

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from test_lowerings import _NegativeIndexReads  # noqa: E402 - the CPU test's model


for op in ("embedding", "index_select", "gather"):
    torch._dynamo.reset()
    model = _NegativeIndexReads(op).eval()
    model.table.data = torch.arange(40.0).reshape(10, 4)  # row i reads 8i+1 .. 8i+7 through the model's * 2 + 1
    model = model.cuda()
    compiled = torch.compile(model, backend="hybrid_trt", options={"min_block_size": 1})
    ok, bad = torch.tensor([[1, 2, 3, 4]], device="cuda"), torch.tensor([[-1, 2, 3, 4]], device="cuda")
    with torch.no_grad():
        same = torch.equal(compiled(ok), model(ok))
        try:
            got = compiled(bad)
            torch.cuda.synchronize()
            row = got.reshape(-1, 4)[0].tolist()
            print(f"{op}: in-range call matches eager: {same}; the row read for index -1 is {row} "
                  f"(eager: device-side assert); delegated: {hybrid_trt.last_report().delegated_op_count} ops")
        except Exception as e:  # noqa: BLE001
            print(f"{op}: in-range call matches eager: {same}; index -1 raises {type(e).__name__}: {str(e)[:160]}")
