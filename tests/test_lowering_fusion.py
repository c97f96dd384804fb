"""Lowerings that ONNX Runtime is meant to fuse are fused: the ONNX a lowering writes for a multi-op formula (GELU
from Erf or Tanh) is in the form ONNX Runtime's optimizer recognises, so the delegate's session runs one kernel
and not a chain of elementwise passes over the tensor (issue 7: convnext_tiny's partitions ran 1.2x ONNX
Runtime's time on the exported model, whose GELUs are single ops). Checked on the optimized graph ONNX Runtime
writes for a session built the way the delegate builds it, and numerically against eager."""
from __future__ import annotations

import os

import onnx
import pytest
import torch
import torch.fx as fx

import hybrid_trt  # noqa: F401
from hybrid_trt import Options
from hybrid_trt.delegates import get_delegate
from hybrid_trt.lowerings import lower_to_onnx

from _helpers import assert_close

aten = torch.ops.aten


def _gelu_then_linear(approximate: str) -> tuple[fx.GraphModule, torch.Tensor]:
    """x -> gelu -> mm with a weight: the GELU's result feeds another op, as in a transformer MLP or a ConvNeXt
    block (a fused node may not produce a graph output directly)."""
    graph = fx.Graph()
    root = torch.nn.Module()
    root.register_buffer("weight", torch.randn(16, 8, generator=torch.Generator().manual_seed(1)), persistent=False)
    x = graph.placeholder("input_0")
    y = graph.call_function(aten.gelu.default, (x,), {"approximate": approximate})
    w = graph.get_attr("weight")
    graph.output((graph.call_function(aten.mm.default, (y, w)),))
    # Tails and the centre: where Erf/Tanh saturate and where GELU bends.
    inp = torch.cat([torch.linspace(-12, 12, 16 * 30).reshape(30, 16),
                     torch.randn(34, 16, generator=torch.Generator().manual_seed(2))])
    return fx.GraphModule(root, graph), inp


def _optimized_session(model: onnx.ModelProto, tmp_path):
    delegate = get_delegate("onnxruntime")
    path = os.path.join(tmp_path, "optimized.onnx")
    session, _ = delegate.session(model.SerializeToString(), torch.device("cpu"), delegate.options_from(Options()),
                                  optimized_path=path)
    return session, onnx.load(path)


@pytest.mark.parametrize("approximate,fused", [("none", "Gelu"), ("tanh", "FastGelu")])
def test_gelu_lowering_is_fused_by_onnxruntime(approximate, fused, tmp_path):
    gm, x = _gelu_then_linear(approximate)
    model = lower_to_onnx(gm, [tuple(x.shape)], [x.dtype])
    session, optimized = _optimized_session(model, tmp_path)
    ops = [(n.domain, n.op_type) for n in optimized.graph.node]
    assert ("com.microsoft", fused) in ops, f"GELU ({approximate}) was not fused by ONNX Runtime: {ops}"
    leftovers = [op for _d, op in ops if op in ("Erf", "Tanh", "Pow", "Div", "Add", "Mul")]
    assert not leftovers, f"GELU ({approximate}) left elementwise ops beside the fused one: {ops}"

    out = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
    with torch.no_grad():
        expected = gm(x)[0]
    assert_close([out], [expected], rtol=1e-5, atol=1e-5, what=f"fused gelu ({approximate})")
