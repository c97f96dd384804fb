"""What a delegated gather does on the CUDA provider with an index out of range (README, 'Fallbacks'): ONNX
Runtime's CUDA gather kernel cannot raise. Run on a GPU machine with onnxruntime-gpu; prints one line per op.

Session 35, H100, tree e2da139 with this script (`gpu_stage_env` of scripts/gpu_stage_env.sh): for each op the
in-range call matched eager and index -1 gave the last row ([73, 75, 77, 79]) with 0 ops delegated: placement
(measured on a GPU) kept the graph on Inductor, whose CUDA code reads a negative index from the end; eager asserts."""
import torch
import hybrid_trt  # noqa: F401 - registers the backend


class Reads(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op, self.table = op, torch.nn.Parameter(torch.arange(40.0).reshape(10, 4))

    def forward(self, ids):
        if self.op == "embedding":
            read = torch.nn.functional.embedding(ids, self.table)
        elif self.op == "index_select":
            read = self.table.index_select(0, ids.flatten())
        else:
            read = self.table.gather(0, ids.reshape(-1, 1).expand(-1, 4))
        return read * 2 + 1


for op in ("embedding", "index_select", "gather"):
    torch._dynamo.reset()
    model = Reads(op).cuda().eval()
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
