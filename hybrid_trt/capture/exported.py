"""The torch.export front end: a model and example inputs -> the ATen graph the partitioner takes.

It gives the middle passes what the Dynamo front end gives them (``backend.hybrid_trt_backend``): an ATen-level,
functional graph decomposed with ``capture_decompositions()`` (ops that have a lowering kept whole), the fake
values of its placeholders, and which placeholders hold weights (by index, with their real tensors).

torch.export keeps CompositeImplicitAutograd ops (``conv2d``, ``linear``, ``upsample_nearest2d.vec``) whole in
its IR, while AOTAutograd under Dynamo always decomposes them, so the table here is theirs (each CIA op's own
decomposition) plus Inductor's, minus every op the lowering registry lowers whole: both front ends then hand
the partitioner the same ops.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import sys
from typing import Any, Optional

import torch
import torch.fx as fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from ..plugins.registry import activate_for as activate_plugins_for
from . import capture_decompositions


@dataclasses.dataclass
class ExportCapture:
    gm: fx.GraphModule  # ATen, functional, decomposed; placeholders: weights first, then the user inputs
    inputs: list  # fake value of every placeholder of ``gm``, in order
    weights: dict[int, torch.Tensor]  # placeholder index -> real tensor (parameters, buffers, lifted constants)
    user_inputs: list[int]  # placeholder indices of the user's (flattened) inputs
    program: ExportedProgram  # decomposed; its in/out specs flatten and rebuild the user's arguments and outputs


def export_decompositions() -> dict:
    from torch.export.exported_program import _split_decomp_table_to_cia_and_python_decomp
    from ..lowerings import registered_targets
    cia, _core = _split_decomp_table_to_cia_and_python_decomp(dict(torch.export.default_decompositions().materialize()))
    keep = registered_targets()
    table = {op: fn for op, fn in cia.items() if op not in keep}
    table.update(capture_decompositions())
    return table


def capture_export(model: torch.nn.Module, args: tuple, kwargs: Optional[dict] = None,
                   dynamic_shapes: Any = None) -> ExportCapture:
    """torch.export ``model`` (non-strict, inference) and decompose it for the partitioner."""
    with torch.no_grad():
        with _partial_graph_kept_back():
            program = torch.export.export(model, tuple(args), kwargs or {}, dynamic_shapes=dynamic_shapes,
                                          strict=False)
        activate_plugins_for(program.graph)  # before the decomposition table reads the lowerings
        program = program.run_decompositions(export_decompositions())
    signature = program.graph_signature
    mutated = [s for s in signature.output_specs if s.kind not in (OutputKind.USER_OUTPUT,)]
    inputs_written = sorted(str(s.target) for s in mutated if s.kind is OutputKind.USER_INPUT_MUTATION)
    if inputs_written:
        raise ValueError(
            f"hybrid_trt.export: the model writes to its input(s) in place in forward ({', '.join(inputs_written)}); "
            "an exported package runs a pure function of its inputs. Compute a new tensor instead (x = x * 2, "
            "not x.mul_(2)), or clone the input before writing to it.")
    if mutated:
        raise ValueError(
            "hybrid_trt.export: the model writes to its own state in forward "
            f"({', '.join(sorted(str(s.target) for s in mutated))}); an exported package runs a pure function of "
            "its inputs. Move the state update out of forward (or keep it in eager PyTorch).")
    _drop_metadata_asserts(program.graph_module)
    _route_interpolate(program.graph_module)
    placeholders = [n for n in program.graph_module.graph.nodes if n.op == "placeholder"]
    tensors = {**program.state_dict, **program.constants}
    weights, user_inputs = {}, []
    for i, (node, spec) in enumerate(zip(placeholders, signature.input_specs)):
        if spec.kind is InputKind.USER_INPUT:
            user_inputs.append(i)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            value = tensors[spec.target]
            if isinstance(value, torch.Tensor):
                weights[i] = value.detach()
        else:
            raise ValueError(f"hybrid_trt.export: unsupported graph input {node.name!r} of kind {spec.kind.name}")
    return ExportCapture(program.graph_module, [n.meta.get("val") for n in placeholders], weights, user_inputs,
                         program)


@contextlib.contextmanager
def _partial_graph_kept_back():
    """torch.export prints the partial graph of a failed trace to stderr before it raises, once per nested wrapper
    (twice 230 KB for torchvision's SSDlite, whose post-processing has data-dependent sizes); the graph is on the
    exception (``partial_fx_graph``), where the caller keeps it (``hybrid_trt.export`` writes it to a file).
    Anything else written to stderr meanwhile is passed on when the export ends."""
    held, graph = io.StringIO(), None
    try:
        with contextlib.redirect_stderr(held):
            yield
    except BaseException as e:
        graph = getattr(e, "partial_fx_graph", None)
        raise
    finally:
        text = held.getvalue()
        if graph is not None:
            text = text.replace(f"{graph}\n", "")  # printed once per wrapper it passes
        if text:
            sys.stderr.write(text)


def _drop_metadata_asserts(gm: fx.GraphModule) -> None:
    """torch.export records each ``.to()``'s trace-time dtype/device as ``aten._assert_tensor_metadata``; the
    Dynamo graph has no such nodes, and they would count as ops no delegate takes."""
    asserts = [n for n in gm.graph.nodes if n.target is torch.ops.aten._assert_tensor_metadata.default]
    for node in asserts:
        gm.graph.erase_node(node)
    if asserts:
        gm.recompile()


def _route_interpolate(gm: fx.GraphModule) -> None:
    """``F.interpolate`` reaches torch.export's IR as ``upsample_*2d.vec``; the Dynamo front end routes it
    through ``hybrid_trt::interpolate`` (capture/preserve.py), and so does this one, so both hand the partitioner
    the same op (Inductor gets it decomposed back in either case)."""
    from .preserve import interpolate  # noqa: F401  (defines torch.ops.hybrid_trt.interpolate)
    aten = torch.ops.aten
    changed = False
    for node in gm.graph.nodes:
        if node.target is aten.upsample_nearest2d.vec:
            x, size, scales = (list(node.args) + [None] * 3)[:3]
            mode, align = "nearest", None
        elif node.target is aten.upsample_bilinear2d.vec:
            x, size, align, scales = (list(node.args) + [None] * 4)[:4]
            mode = "bilinear"
        else:
            continue
        if any(isinstance(v, fx.Node) for v in list(size or []) + list(scales or [])):
            continue  # symbolic output sizes: hybrid_trt::interpolate takes concrete ones, as in preserve.py
        node.target = torch.ops.hybrid_trt.interpolate.default
        node.args = (x, None if size is None else list(size), None if scales is None else [float(v) for v in scales],
                     mode, align)
        node.kwargs = {}
        changed = True
    if changed:
        gm.recompile()
