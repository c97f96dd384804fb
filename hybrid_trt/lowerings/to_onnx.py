"""Lower one extracted partition, specialised to concrete input shapes, to an ONNX ModelProto."""
from __future__ import annotations

import operator
from typing import Any, Sequence

import onnx
import torch
import torch.fx as fx
from onnx import helper

from . import ops  # noqa: F401  (registers the built-in lowerings)
from .context import GENERIC, OPSET, TORCH_TO_ONNX, LoweringContext, tensor_proto
from .registry import STANDARD_DOMAIN, lowering_for


class LoweringError(RuntimeError):
    pass


class _MetaInterpreter(fx.Interpreter):
    """Runs the partition on meta tensors to get every node's concrete shape for this input signature."""

    def get_attr(self, target, args, kwargs):
        real = super().get_attr(target, args, kwargs)
        return torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device="meta")

    def call_function(self, target, args, kwargs):
        if "device" in kwargs:  # factories (arange, full, ...) would make real tensors next to the meta ones
            kwargs = {**kwargs, "device": torch.device("meta")}
        try:
            return super().call_function(target, args, kwargs)
        except NotImplementedError:  # no Meta kernel (fake quantization): ask fake tensors, as Dynamo's trace did
            return _through_fake_tensors(target, args, kwargs)


def _through_fake_tensors(target, args, kwargs):
    """Output metas of an op without a Meta kernel: FakeTensorMode runs such an op's CPU kernel on stand-in
    data (its fallback), which is how the op was traced in the first place."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils import _pytree as pytree

    mode = FakeTensorMode()

    def fake(t):
        if not isinstance(t, torch.Tensor):
            return t
        return mode.from_tensor(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu"))

    def meta(t):
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") if isinstance(t, torch.Tensor) else t

    fake_args, fake_kwargs = pytree.tree_map(fake, (args, kwargs))
    with mode:
        out = target(*fake_args, **fake_kwargs)
    return pytree.tree_map(meta, out)


def specialise(module: fx.GraphModule, input_shapes: Sequence, input_dtypes: Sequence,
               sizes: Sequence[int]) -> dict[fx.Node, Any]:
    values: dict[fx.Node, Any] = {}
    interp = _MetaInterpreter(module)
    original = interp.run_node

    def run_node(node):
        out = original(node)
        values[node] = out
        return out

    interp.run_node = run_node
    metas = [torch.empty(tuple(s), dtype=d, device="meta") for s, d in zip(input_shapes, input_dtypes)]
    interp.run(*metas, *sizes)
    return values


def lower_to_onnx(module: fx.GraphModule, input_shapes: Sequence, input_dtypes: Sequence,
                  sizes: Sequence[int] = (), custom_domains: dict[str, int] | None = None,
                  target: str = GENERIC) -> onnx.ModelProto:
    return lower_partition(module, input_shapes, input_dtypes, sizes, custom_domains, target)[0]


def lower_partition(module: fx.GraphModule, input_shapes: Sequence, input_dtypes: Sequence,
                    sizes: Sequence[int] = (), custom_domains: dict[str, int] | None = None,
                    target: str = GENERIC) -> tuple[onnx.ModelProto, list[torch.Tensor]]:
    """The ONNX model of the partition for one input signature, and its output metas (shape and dtype), from
    one specialisation pass. ``target``: what will run it (context.GENERIC or ORT_CPU; the delegate's
    ``lowering_target``)."""
    values = specialise(module, input_shapes, input_dtypes, sizes)
    ctx = LoweringContext(values, target)
    graph_inputs, graph_outputs = [], []
    domains = {STANDARD_DOMAIN: OPSET, **(custom_domains or {})}
    tensor_index = 0
    for node in module.graph.nodes:
        if node.op == "placeholder":
            val = values[node]
            if isinstance(val, torch.Tensor):
                name = f"input_{tensor_index}"
                tensor_index += 1
                graph_inputs.append(helper.make_tensor_value_info(name, TORCH_TO_ONNX[val.dtype], list(val.shape)))
                ctx.onnx_names[node] = name
        elif node.op == "get_attr":
            real = getattr(module, node.target)
            ctx.initializers.append(tensor_proto(real, node.target))
            ctx.onnx_names[node] = node.target
        elif node.op == "call_function":
            if node.target is operator.getitem and isinstance(values[node.args[0]], (tuple, list)):
                ctx.onnx_names[node] = ctx.onnx_names[node.args[0]][node.args[1]]
                continue
            lowering = lowering_for(node.target)
            if lowering is None:
                raise LoweringError(f"no lowering for {node.target}")
            try:
                ctx.onnx_names[node] = lowering.fn(ctx, node)
            except Exception as e:  # noqa: BLE001 - re-raised with the node named
                raise LoweringError(f"lowering {lowering.name} failed on {node.format_node()}: {e}") from e
            if lowering.domain:
                domains.setdefault(lowering.domain, 1)
        elif node.op == "output":
            seen = set()
            for i, out in enumerate(node.args[0]):
                name = ctx.onnx_names[out]
                if name in seen:  # the same value returned twice needs a second name
                    name = ctx.op("Identity", name)
                seen.add(name)
                val = values[out]
                graph_outputs.append(helper.make_tensor_value_info(name, TORCH_TO_ONNX[val.dtype], list(val.shape)))
    output_names = [o.name for o in graph_outputs]
    nodes = ctx.live_nodes(output_names)
    graph = helper.make_graph(nodes, "hybrid_trt_partition", graph_inputs, graph_outputs,
                              initializer=ctx.used_initializers(output_names, nodes))
    opsets = [helper.make_opsetid(d, v) for d, v in domains.items()]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8, producer_name="hybrid_trt")
    out = next(n for n in module.graph.nodes if n.op == "output")
    return model, [values[o] for o in out.args[0]]
