"""The Dynamo backend: capture -> partition -> lower/build -> stitch -> Inductor, with fallbacks that complete."""
from __future__ import annotations

import dataclasses
import time
from collections import Counter

import torch
import torch.fx as fx
from torch._guards import detect_fake_mode
from torch._inductor.compile_fx import compile_fx, compile_fx_inner

from . import delegates as _delegates
from .capture.preserve import INDUCTOR_DECOMPOSITIONS, preserve_ops
from .capture import capture_decompositions, needs_gradients, weight_input_indices
from .log import logger
from .options import Options, make_options
from .partitioner import partition_graph
from .partitioner.capability import NodeKind, classify, op_name
from .partitioner.extract import extract
from .report import CompileReport, InductorOp, PartitionReport, new_report
from .stitch.runtime import DelegateBuildError, PartitionRuntime
from .stitch.stitcher import stitch


@dataclasses.dataclass(eq=False)
class _Delegated:
    nodes: list
    extracted: object
    handle: int
    runtime: PartitionRuntime


def hybrid_trt_backend(gm: fx.GraphModule, example_inputs, options=None, **unexpected):
    """``torch.compile(model, backend="hybrid_trt", options={...})``."""
    if unexpected:
        raise ValueError(f"hybrid_trt got unsupported torch.compile argument(s) {sorted(unexpected)} "
                         "(e.g. mode=); pass hybrid_trt settings through options={...}")
    opts = make_options(options)
    report = new_report()
    if needs_gradients(example_inputs):
        report.whole_graph_reason = "graph needs gradients (inputs require grad and grad mode is on)"
        logger.info("hybrid_trt: graph %d needs gradients; compiled by Inductor alone", report.graph_index)
        return compile_fx(gm, example_inputs)
    weights = {i: example_inputs[i] for i in weight_input_indices(example_inputs)}

    def inner_compile(aten_gm: fx.GraphModule, aot_inputs, **kwargs):
        if not kwargs.get("is_inference", True) or kwargs.get("is_backward", False):
            report.whole_graph_reason = "training graph"
            return compile_fx_inner(aten_gm, aot_inputs, **kwargs)
        stitched, keep_alive = _hybrid_graph(aten_gm, aot_inputs, weights, len(example_inputs), opts, report)
        try:
            compiled = compile_fx_inner(stitched, aot_inputs, **kwargs)
        except Exception as e:
            if opts.strict:
                raise
            report.inductor_status = f"ran as FX graph (Inductor failed: {type(e).__name__}: {e})"
            logger.warning("hybrid_trt: Inductor failed on graph %d, running it as an FX graph: %s",
                           report.graph_index, e)
            compiled = _boxed(stitched)
        try:
            compiled._hybrid_trt_runtimes = keep_alive  # the op registry holds weak references only
        except AttributeError:
            compiled = _KeepAlive(compiled, keep_alive)
        if opts.print_report:
            print(report.table())
        return compiled

    gm = preserve_ops(gm)
    # Inductor's FX-graph and AOTAutograd caches key on the graph, not on inner_compile: left on, they would hand
    # back a plain-Inductor result for this graph (or store ours, with its process-local delegate handles).
    # force_disable_caches is the one switch that TORCHINDUCTOR_FX_GRAPH_CACHE=1 style variables cannot override.
    with torch.compiler.config.patch(force_disable_caches=True):
        return compile_fx(gm, example_inputs, inner_compile=inner_compile, decompositions=capture_decompositions())


def _hybrid_graph(gm: fx.GraphModule, aot_inputs, weights: dict, n_dynamo_inputs: int, opts: Options,
                  report: CompileReport):
    t0 = time.perf_counter()
    constants = _constants(gm, weights, n_dynamo_inputs)
    delegate_objs = [_delegates.get_delegate(n) for n in opts.resolved_delegates()]
    plan = partition_graph(gm.graph, delegate_objs, opts.min_block_size, opts.force_inductor_ops, frozenset(constants))
    reasons = dict(plan.inductor_reasons)
    delegated: list[_Delegated] = []
    for k, part in enumerate(plan.partitions):
        ex = extract(part, constants)
        in_metas = [n.meta["val"] for n in ex.tensor_inputs]
        out_metas = [n.meta["val"] for n in ex.outputs]
        symbolic = bool(ex.size_inputs) or any(_is_symbolic(m) for m in in_metas + out_metas)
        preport = PartitionReport(
            index=k, delegate=part.delegate, op_count=part.op_count,
            ops=dict(Counter(op_name(n) for n in part.nodes if classify(n) is NodeKind.OP)),
            input_shapes=[_shape(m) for m in in_metas], output_shapes=[_shape(m) for m in out_metas])
        report.partitions.append(preport)
        device = _device_of(in_metas, ex, constants)
        runtime = PartitionRuntime(f"partition {k}", ex.module, part.delegate, device, opts, preport, symbolic)
        if not symbolic:
            try:
                runtime.build_static(in_metas)
                runtime.first_call_guard()
            except DelegateBuildError as e:
                if opts.strict:
                    raise
                preport.status = "fell back to Inductor"
                preport.events.append(f"fell back to Inductor: {e}")
                logger.warning("hybrid_trt: partition %d (%s, %d ops) falls back to Inductor: %s", k,
                               part.delegate, part.op_count, e)
                for n in part.nodes:
                    if classify(n) is NodeKind.OP:
                        reasons[n] = f"build failed ({part.delegate})"
                continue
        delegated.append(_Delegated(part.nodes, ex, runtime.handle, runtime))
    report.inductor_ops = [InductorOp(n.name, op_name(n), why) for n, why in reasons.items()]
    stitched = stitch(gm, delegated)
    stitched = _decompose_for_inductor(stitched, aot_inputs)
    report.partition_seconds = time.perf_counter() - t0
    return stitched, [d.runtime for d in delegated]


def _constants(gm: fx.GraphModule, weights: dict, n_dynamo_inputs: int) -> dict:
    """Graph nodes holding weights -> real tensors (placeholders Dynamo marked static, and get_attr constants)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    mutated = _mutated_nodes(gm)
    out = {}
    if len(placeholders) == n_dynamo_inputs:
        for i, node in enumerate(placeholders):
            # A buffer the graph writes (e.g. a counter, a cache: ``copy_`` into it after functionalization)
            # changes between calls, so baking its compile-time value into an engine would be wrong.
            if i in weights and isinstance(node.meta.get("val"), torch.Tensor) and node not in mutated:
                out[node] = weights[i]
    else:
        logger.info("hybrid_trt: graph inputs do not line up with Dynamo's (%d vs %d); weights stay inputs",
                    len(placeholders), n_dynamo_inputs)
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            if isinstance(value, torch.Tensor):
                out[node] = value
    return out


def _mutated_nodes(gm: fx.GraphModule) -> set:
    """Nodes some op of the graph writes to (arguments whose schema alias info says is_write)."""
    out = set()
    for n in gm.graph.nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        for i, arg in enumerate(n.target._schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                value = n.args[i] if i < len(n.args) else n.kwargs.get(arg.name)
                if isinstance(value, fx.Node):
                    out.add(value)
    return out


def _decompose_for_inductor(gm: fx.GraphModule, aot_inputs) -> fx.GraphModule:
    """Give Inductor the remainder in the decomposed form it expects (ops kept whole for delegates included);
    re-tracing also fills in ``meta['val']`` for the delegate calls."""
    from torch._dispatch.python import enable_python_dispatcher
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    fake_mode = detect_fake_mode(aot_inputs)
    with fake_mode, enable_python_dispatcher():
        table = {**select_decomp_table(), **INDUCTOR_DECOMPOSITIONS}
        return make_fx(gm, decomposition_table=table, tracing_mode="real",
                       _allow_non_fake_inputs=False)(*aot_inputs)


def _is_symbolic(meta) -> bool:
    return isinstance(meta, torch.Tensor) and any(not isinstance(s, int) for s in meta.shape)


def _shape(meta) -> list:
    return [str(s) if not isinstance(s, int) else s for s in meta.shape] if isinstance(meta, torch.Tensor) else []


def _device_of(in_metas, ex, constants) -> torch.device:
    for m in in_metas:
        return m.device
    for name in ex.constant_names:
        return getattr(ex.module, name).device
    return torch.device("cpu")


def _boxed(gm: fx.GraphModule):
    from torch._functorch.aot_autograd import make_boxed_func
    return make_boxed_func(gm.forward)


class _KeepAlive:
    _boxed_call = True

    def __init__(self, fn, keep):
        self._fn, self._keep = fn, keep

    def __call__(self, args):
        return self._fn(args)
