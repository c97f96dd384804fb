"""One compile in a fresh process, for the cache tests: ``python cache_child.py BACKEND MODEL`` prints a JSON line
(``RESULT {...}``) with what happened. The cache directories come from the environment
(TORCHINDUCTOR_CACHE_DIR, HYBRID_TRT_CACHE_DIR), so consecutive children share them like restarted services.

MODEL ``transformer`` and ``detector`` are examples/models.py (small); ``renamed`` is the transformer block
written again with other Python variable and attribute names (same weights); ``dynamic`` is the transformer
compiled with dynamic=True and called with two batch sizes (``dynamic_new``: and a third one); ``bounded`` is the
transformer with its batch marked dynamic with bounds (``torch._dynamo.mark_dynamic(x, 0, min=2, max=16)``),
called with three batch sizes (``bounded_other_first``: the first of them another one); ``unbounded`` the same with
``mark_dynamic(x, 0)``."""
import json
import pathlib
import sys

import torch
import torch.nn as nn

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import hybrid_trt  # noqa: E402
from examples.models import build  # noqa: E402
from hybrid_trt.engines.runtime import PartitionRuntime  # noqa: E402


class RenamedBlock(nn.Module):
    """examples.models.TransformerBlock with every name changed."""

    def __init__(self, original):
        super().__init__()
        self.norm_a, self.qkv_proj, self.out_proj = original.ln1, original.qkv, original.proj
        self.norm_b, self.expand, self.contract = original.ln2, original.fc1, original.fc2
        self.n_heads = original.heads

    def forward(self, tokens):
        batch, length, width = tokens.shape
        packed = self.qkv_proj(self.norm_a(tokens)).reshape(batch, length, 3, self.n_heads, width // self.n_heads)
        queries, keys, values = packed.permute(2, 0, 3, 1, 4)
        scale = (width // self.n_heads) ** -0.5
        weights = torch.softmax(queries @ keys.transpose(-2, -1) * scale, dim=-1)
        mixed = (weights @ values).transpose(1, 2).reshape(batch, length, width)
        hidden = tokens + self.out_proj(mixed)
        return hidden + self.contract(nn.functional.gelu(self.expand(self.norm_b(hidden))))


def main(backend: str, name: str) -> None:
    torch.manual_seed(0)
    dynamic = name in ("dynamic", "dynamic_new")  # symbolic batch: engines per shape, built (or loaded) at first sight
    marked = name in ("bounded", "bounded_other_first", "unbounded")
    model, x = build("transformer" if name in ("renamed", "dynamic", "dynamic_new") or marked else name, small=True)
    if marked:
        x = torch.randn(6 if name == "bounded_other_first" else 4, *x.shape[1:])
        torch._dynamo.mark_dynamic(x, 0, **({} if name == "unbounded" else {"min": 2, "max": 16}))
    if name == "renamed":
        model = RenamedBlock(model).eval()
    calls = []
    original_run = PartitionRuntime.run

    def counting_run(self, inputs, sizes):
        calls.append(self.key)
        return original_run(self, inputs, sizes)

    PartitionRuntime.run = counting_run
    from torch._dynamo.utils import counters
    with torch.no_grad():
        expected = model(x)
        compiled = torch.compile(model, backend=backend, dynamic=dynamic or None)
        out = compiled(x)
        if dynamic or marked:
            for batch in (3, 5) if name in ("dynamic_new", "unbounded") or marked else (3,):  # 5: never seen before
                other = torch.randn(batch, *x.shape[1:])
                assert torch.allclose(compiled(other), model(other), rtol=1e-4, atol=1e-4)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    out = out if isinstance(out, (tuple, list)) else (out,)
    matches = all(torch.allclose(a, b, rtol=1e-4, atol=1e-4) for a, b in zip(out, expected))
    result = {"matches": matches, "delegate_calls": len(calls),
              "aot_cache": {k: v for k, v in counters["aot_autograd"].items() if "cache" in k},
              "fx_cache": {k: v for k, v in counters["inductor"].items() if "cache" in k}}
    if backend == "hybrid_trt":
        reports = hybrid_trt.reports()
        result["from_inductor_cache"] = [r.from_inductor_cache for r in reports]
        result["from_graph_manifest"] = [r.from_graph_manifest for r in reports]
        result["per_call"] = [r.per_call for r in reports]
        result["partitions"] = [{"status": p.status, "key": p.key, "engines": [e.source for e in p.engines],
                                 "signatures": [e.signature for e in p.engines],
                                 "seconds": [e.seconds for e in p.engines]} for r in reports for p in r.partitions]
        result["tables"] = [r.table() for r in reports]
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
