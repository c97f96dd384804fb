"""The Dynamo backend: capture -> partition -> lower -> engines (built or loaded by content key) -> stitch ->
Inductor, with fallbacks that complete. Inductor's own caches stay on, under a cache-key tag that identifies the
hybrid compile (engines/graph.py)."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import time
from collections import Counter

import torch
import torch.fx as fx
from torch._dynamo.exc import RestartAnalysis
from torch._guards import detect_fake_mode
from torch._inductor.compile_fx import compile_fx, compile_fx_inner

from . import cudagraphs
from . import delegates as _delegates
from . import placement as _placement
from .capture.attention import canonicalize_attention
from .capture.bounds import declared_ranges
from .capture.sizes import sizes_from_inputs
from .capture.preserve import inductor_decompositions, preserve_ops
from .capture import capture_decompositions, needs_gradients, weight_input_indices
from .plugins.registry import activate_for as activate_plugins_for
from .inductor_fixes import has_symbolic_sizes, inductor_defects_avoided
from . import log
from .log import TORCH_CPP_BUILDER, logger, notice_if_slow, quiet
from .options import Options, make_options
from .partitioner import partition_graph
from .partitioner.capability import NodeKind, classify, declined_for_dtype_or_device, op_name
from .partitioner.extract import extract
from .report import CompileReport, InductorOp, PartitionReport, discard_report, new_report
from .scratch import inductor_files_removed_at_exit
from .engines.graph import GraphCache, graph_key, open_graph, source_hashes_in_background
from .engines.runtime import PartitionRuntime, Policy, engine_store, prepare_runtime
from .guards import record_baked_weights
from .stitch import baked_weights as _baked_weights
from .stitch import direct as _direct
from .stitch.fallback import compile_stitched
from .stitch.layout import keep_traced_strides, views_to_reshapes
from .stitch.stitcher import stitch
from .whole_graph import WholeGraph


@dataclasses.dataclass(eq=False)
class _Delegated:
    nodes: list
    extracted: object
    key: str
    runtime: PartitionRuntime
    report: PartitionReport


def hybrid_trt_backend(gm: fx.GraphModule, example_inputs, options=None, mode=None, **unexpected):
    """``torch.compile(model, backend="hybrid_trt", options={...})``, or ``mode="reduce-overhead"`` (CUDA graphs,
    see cudagraphs.py)."""
    if unexpected:
        raise ValueError(f"hybrid_trt got unsupported torch.compile argument(s) {sorted(unexpected)}; pass "
                         "hybrid_trt settings through options={...}")
    return _compile(gm, example_inputs, make_options(cudagraphs.options_with_mode(options, mode)), True)


def _compile(gm: fx.GraphModule, example_inputs, opts: Options, check_weights: bool):
    """The backend with validated options. ``check_weights``: the callable checks that a call passes the weights
    its engines baked (stitch/baked_weights.py); False for the compile that check makes for other weights, whose
    own check (the ids it is looked up by) has already been made."""
    report = new_report()
    try:
        with quiet(TORCH_CPP_BUILDER), inductor_defects_avoided(has_symbolic_sizes(example_inputs)), \
                torch._inductor.config.patch(opts.inductor_patches), \
                notice_if_slow(f"hybrid_trt: compiling graph {report.graph_index} ({len(gm.graph.nodes)} nodes)",
                               after=log.GRAPH_NOTICE_AFTER_S):
            return _compile_graph(gm, example_inputs, opts, check_weights, report)
    except RestartAnalysis:
        # Dynamo abandons this trace and calls the backend again (with dynamic=True, to specialise a float it had
        # traced as a symbol): nothing was compiled here, and the next call's report is the graph's.
        discard_report(report)
        raise


def _compile_graph(gm: fx.GraphModule, example_inputs, opts: Options, check_weights: bool, report: CompileReport):
    activate_plugins_for(gm.graph)  # before the decomposition table and the graph key read the lowerings
    if needs_gradients(example_inputs):
        report.whole_graph_reason = "graph needs gradients (grad mode is on and parameters or inputs require grad)"
        # Said as a warning: calling a model for inference without torch.no_grad() is the commonest way to get
        # nothing delegated, and the values are right, so nothing else would tell the user.
        logger.warning("hybrid_trt: graph %d needs gradients (grad mode is on and parameters or inputs require "
                       "grad), so Inductor compiles it alone and nothing is delegated (delegates run inference "
                       "only). For inference, call the model under torch.no_grad() or torch.inference_mode() "
                       "(README, 'Status and limits')", report.graph_index)
        if opts.cuda_graphs and not opts.inductor_cuda_graphs:  # the whole runner captures inference graphs only
            report.cuda_graphs = cudagraphs.whole_runner_record(["the graph needs gradients (Inductor alone, "
                                                                 "uncaptured under the whole runner)"])
        with cudagraphs.compiling(opts.cuda_graphs, opts.inductor_cuda_graphs):
            return _inductor_alone(gm, example_inputs, opts)
    weights = {i: example_inputs[i] for i in weight_input_indices(example_inputs)}
    for i in _baked_weights.unwatchable_state(gm, weights):
        del weights[i]  # an input of the engines, as no call could see it change (baked_weights.py)
    continues = _ends_at_graph_break(gm)  # the call goes on after this graph (placement.py)
    original = _baked_weights.copy_graph(gm) if weights and check_weights else None  # for calls with other weights
    store = engine_store(opts)
    # Dimensions marked dynamic with bounds get an engine per range where the partition allows one.
    policy = Policy(opts.strict, opts.max_engines_per_partition, ranges=declared_ranges(gm),
                    inductor_patches=tuple(opts.inductor_patches.items()))
    runtimes: list = []  # held by the compiled function: the key registry holds weak references only
    graph: GraphCache | None = None
    ran: list = []  # inner_compile ran (else Inductor's AOTAutograd cache served the graph)
    per_call: dict = {}  # what the frame calls beyond Inductor's code (see _per_call); kept in the manifest
    compiled_weights: dict = {}  # weights by position among the compiled graph's inputs (see _graph_weights)

    def inner_compile(aten_gm: fx.GraphModule, aot_inputs, **kwargs):
        if not kwargs.get("is_inference", True) or kwargs.get("is_backward", False):
            report.whole_graph_reason = "training graph"
            if opts.cache:
                return compile_fx_inner(aten_gm, aot_inputs, **kwargs)
            # Its backward is compiled at the first backward call, outside the cache-off block below.
            with torch.compiler.config.patch(force_disable_caches=True), inductor_files_removed_at_exit():
                return compile_fx_inner(aten_gm, aot_inputs, **kwargs)
        ran.append(True)
        loaded = graph.runtimes if graph is not None else {}
        lifted = _lifted_weights(gm, aot=True)
        graph_weights = _graph_weights(lifted, weights)  # by position among the compiled graph's inputs
        compiled_weights.clear()
        compiled_weights.update(graph_weights)
        try:
            delegated = _hybrid_graph(aten_gm, graph_weights, len(lifted) + len(example_inputs), opts, report,
                                      store, policy, loaded, continues=continues)
        except Exception as e:  # noqa: BLE001 - a bug or failure before any partition is stitched in
            if opts.strict:
                raise
            logger.warning("hybrid_trt: partitioning graph %d failed; Inductor compiles all of it: %s",
                           report.graph_index, e)
            report.whole_graph_reason = f"partitioning failed: {type(e).__name__}: {e}"
            for p in report.partitions:
                p.status = "fell back to Inductor"
            delegated = []
        # The stitched graph is already decomposed with Inductor's own table (_decompose_for_inductor), which is
        # the default; the capture table compile_fx passes down is not picklable and would make Inductor bypass
        # its FX-graph cache (and with it the AOTAutograd cache).
        kwargs.pop("get_decomp_fn", None)
        # Which partitions stay outside CUDA graphs.
        capture = cudagraphs.plan_capture(delegated, opts.cuda_graphs, opts.whole_runner)
        compiled_graphs: list = []  # each graph Inductor compiled without raising; the last is the one returned
        compiled, kept = compile_stitched(
            delegated, stitch=lambda parts: capture.apply(_stitched(aten_gm, parts, aot_inputs, report)),
            compile=lambda g: _recorded(compiled_graphs, g, cudagraphs.compile_observed(
                lambda: compile_fx_inner(g, aot_inputs, **kwargs), g, kwargs.get("cudagraphs"), capture, report)),
            as_fx=_boxed,
            route_back=lambda d, why, warn: _route_back(d, why, warn, report), original=aten_gm,
            strict=opts.strict, report=report)
        runtimes.extend(d.runtime for d in kept)
        per_call.clear()
        if kept and compiled_graphs and compiled_graphs[-1][1] is compiled:
            per_call.update(_per_call(len(lifted), example_inputs, compiled_graphs[-1][0], graph_weights, kept,
                                      opts.inductor_cuda_graphs, report))
        if capture.whole:  # kept in the manifest: a warm start wraps the graph without compiling it
            per_call["whole_graph_reasons"] = list(report.cuda_graphs.reasons) if report.cuda_graphs else [
                "the graph Inductor compiled was not the stitched one"]
        return compiled

    gm = preserve_ops(gm)
    compile_inductor = lambda: compile_fx(  # noqa: E731
        gm, example_inputs, inner_compile=inner_compile, decompositions=capture_decompositions())
    if opts.inductor_cuda_graphs:  # Inductor's CUDA-graph trees around the stitched graph; its skip messages reported
        compile_inductor = cudagraphs.with_graphs(compile_inductor, report, gm)
    if not opts.cache:
        # Caching off: Inductor's caches too (force_disable_caches is the one switch TORCHINDUCTOR_FX_GRAPH_CACHE=1
        # style variables cannot override). Its entries would call engines that are in no store. It then compiles
        # into a fresh directory it never removes; scratch.py removes them at exit.
        with torch.compiler.config.patch(force_disable_caches=True), inductor_files_removed_at_exit():
            compiled = compile_inductor()
    else:
        with source_hashes_in_background() as start_hashing:  # Inductor's cache key needs them
            t0 = time.perf_counter()
            # They overlap with the engine loads unless the stored graph is called directly (no Inductor at all).
            key = graph_key(gm, example_inputs, weights, opts, policy.ranges)
            graph = open_graph(store, _with_traced_state(key, continues), policy,
                               before_loads=lambda
                               stored: None if _stored_direct(stored, opts.inductor_cuda_graphs) else start_hashing())
            logger.debug("hybrid_trt: graph %d key and stored engines in %.3f s", report.graph_index,
                         time.perf_counter() - t0)
            served = _served_directly(graph, gm, weights, opts, report) if graph.complete else None
            if served is not None:
                return _checked(served, weights, original, report, opts) if original is not None else served
            start_hashing()
            # The AOTAutograd cache keys the graph before partitioning, and the FX-graph cache the stitched graph:
            # the tag (in both keys) keeps plain-Inductor and hybrid entries apart and ties them to the stored
            # engines.
            with torch.compiler.config.patch(cache_key_tag=graph.tag):
                compiled = compile_inductor()
        if ran:
            graph.save(report, runtimes, _per_call_json(per_call))  # record what the compiled graph calls
        elif graph.complete:
            graph.fill_report(report, inductor_cache=True)  # served by Inductor's cache
            _warn_as_stored(report)
            runtimes.extend(graph.runtimes.values())
            per_call.update(_per_call_from_json(graph.per_call))
    if opts.print_report:
        print(report.table())
    # (a warm start did not run inner_compile: the positions are AOTAutograd's order, as the cold compile checked)
    positions = compiled_weights or _graph_weights(_lifted_weights(gm), weights)
    called = _hold(_called_per_call(compiled, per_call, positions, runtimes, opts.inductor_cuda_graphs,
                                    opts.whole_runner, report, weights),
                   runtimes)
    return _checked(called, weights, original, report, opts) if runtimes and original is not None else called


def _with_traced_state(key: str, continues: bool = False) -> str:
    """``key`` (the captured graph's) extended by the global state AOTAutograd traces it under. Dynamo's graph is
    the same code inside and outside ``torch.autocast``; the casts are added when it is traced, so a graph first
    compiled in float32 and stored was served, engines and all, to the same model called under autocast (float32
    outputs where eager gives bfloat16). The state is the one AOTAutograd's own cache keys on
    (``AOTAutogradCacheDetails._record_runtime_state``), and the default dtype, which factory calls read then."""
    autocast = {device: str(torch.get_autocast_dtype(device)) for device in torch._C._autocast_supported_devices()
                if torch.is_autocast_enabled(device)}
    state = (f"autocast={sorted(autocast.items())} deterministic={torch.are_deterministic_algorithms_enabled()} "
             f"default_dtype={torch.get_default_dtype()}")
    if continues:  # placement judged its partitions as followed by more of the call (placement.py)
        state += " ends_at_graph_break"
    return hashlib.sha256(f"{key} {state}".encode()).hexdigest()


def _checked(called, weights: dict, original, report: CompileReport, opts: Options):
    """``called`` (which holds its runtimes), run only with the weights its engines baked; other weights get a
    compile of their own (stitch/baked_weights.py)."""
    checked = _baked_weights.checked(called, weights, original, report.graph_index,
                                     lambda gm, args: _compile(gm, args, opts, check_weights=False),
                                     lambda gm, args: _inductor_alone(gm, args, opts), report.to_inductor_alone)
    if checked is not called:  # the runtimes stay reachable from what Dynamo calls (benchmarks introspect them)
        from torch._dynamo.eval_frame import innermost_fn
        runtimes = getattr(innermost_fn(called), "_hybrid_trt_runtimes", None)
        if runtimes is not None:
            checked._hybrid_trt_runtimes = runtimes
    return checked


def _stored_direct(stored_per_call, trees: bool) -> bool:
    """Whether a stored graph's per-call plan (None: no usable manifest) calls its engines directly (never under
    Inductor's CUDA-graph ``trees``)."""
    return bool(stored_per_call and stored_per_call.get("direct")) and not trees


def _served_directly(graph: GraphCache, gm: fx.GraphModule, weights: dict, opts: Options,
                     report: CompileReport):
    """A warm start of a graph of delegate calls alone: the direct callable over the loaded engines, with no
    Inductor lookup (its cache key alone hashes torch's sources, 0.3-0.5 s per process), or None.

    Its cold compile decided the plan where AOTAutograd's wrapper is the identity and the compiled graph's inputs
    are Dynamo's arguments (stitch/direct.py); the graph key covers the captured code and input specs, so the
    same plan holds. A plan that cannot be completed here (a runtime missing) leaves the compile to Inductor."""
    per_call = _per_call_from_json(graph.per_call)
    if not _stored_direct(graph.per_call, opts.inductor_cuda_graphs) or per_call.get("direct") is None:
        return None
    runtimes = list(graph.runtimes.values())
    served = _called_per_call(None, per_call, _graph_weights(_lifted_weights(gm), weights), runtimes,
                              opts.inductor_cuda_graphs, opts.whole_runner, report, weights)
    if served is None:
        return None
    graph.fill_report(report, inductor_cache=False)
    _warn_as_stored(report)
    if opts.print_report:
        print(report.table())
    return _hold(served, runtimes)


def _recorded(graphs: list, graph: fx.GraphModule, compiled):
    graphs.append((graph, compiled))
    return compiled


def _lifted_weights(gm: fx.GraphModule, aot: bool = False) -> list:
    """The captured graph's own parameters and buffers (Dynamo's ``install_free_tensors`` puts the model's weights
    there instead of passing them as arguments), in the order AOTAutograd passes them in front of the arguments
    (``aot_autograd.prepare_aot_config``). ``aot``: checked against the list AOTAutograd recorded for this compile
    (called from inner_compile); on any difference, none (the weights then stay graph inputs, as before)."""
    params = dict(gm.named_parameters(remove_duplicate=False))
    buffers = dict(gm.named_buffers(remove_duplicate=False))
    lifted = list(params.values()) + list(buffers.values())
    if aot:
        from torch._guards import TracingContext
        recorded = getattr(TracingContext.try_get(), "params_flat", None)
        if recorded is None or len(recorded) != len(lifted) or any(a is not b for a, b in zip(recorded, lifted)):
            return []
    return lifted


def _graph_weights(lifted: list, weights: dict) -> dict:
    """Weights by position among the compiled graph's inputs: ``lifted`` first, then Dynamo's arguments."""
    return {**dict(enumerate(lifted)), **{len(lifted) + i: t for i, t in weights.items()}}


def _per_call(n_lifted: int, example_inputs, graph: fx.GraphModule, graph_weights: dict, kept: list,
              trees: bool, report: CompileReport) -> dict:
    """What the frame needs at each call beyond Inductor's code, decided while AOTAutograd's metadata is at hand
    (inner_compile): the weights that live only inside engines (for hybrid_trt.skip_guards_on_baked_weights) and,
    for a graph of delegate calls alone, the plan that calls them directly (stitch/direct.py)."""
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    outputs = graph.graph.output_node().args[0]
    n_outputs = len(outputs) if isinstance(outputs, (tuple, list)) else -1
    reason = _direct.input_mapping_reason(n_lifted, example_inputs, len(placeholders))
    if reason is not None:
        logger.debug("hybrid_trt: graph %d: no per-call shortcuts: %s", report.graph_index, reason)
        return {}
    out = {"baked_inputs": _direct.baked_inputs(graph, graph_weights, kept)}
    plan = _direct.plan_of(graph, n_lifted)
    if plan is None:
        return out
    # CUDA engines order themselves against the caller's current stream inside ``run`` (engines/runtime.py), the
    # same call Inductor's code makes, so the direct call needs nothing more on a GPU.
    reason = "Inductor's CUDA graphs" if trees else _direct.aot_wrapper_reason(n_outputs)
    if reason is not None:
        logger.debug("hybrid_trt: graph %d is only delegate calls but keeps Inductor's wrappers: %s",
                     report.graph_index, reason)
        return out
    out["direct"] = plan
    return out


def _per_call_json(per_call: dict) -> dict:
    plan = per_call.get("direct")
    return {"baked_inputs": list(per_call.get("baked_inputs", ())), "direct": plan and plan.to_json(),
            "whole_graph_reasons": per_call.get("whole_graph_reasons")}


def _per_call_from_json(data) -> dict:
    if not isinstance(data, dict):
        return {}
    plan, baked, whole = data.get("direct"), data.get("baked_inputs"), data.get("whole_graph_reasons")
    return {"baked_inputs": [b for b in baked if isinstance(b, int)] if isinstance(baked, list) else [],
            "direct": _direct.DirectPlan.from_json(plan) if plan else None,
            "whole_graph_reasons": [str(r) for r in whole] if isinstance(whole, list) else None}


def _called_per_call(compiled, per_call: dict, graph_weights: dict, runtimes: list, trees: bool, whole: bool,
                     report: CompileReport, weights: dict):
    """The callable Dynamo's frame calls: the direct plan's when there is one (and its runtimes are all here),
    else Inductor's ``compiled`` (None on a warm start that has not consulted Inductor); in the whole runner's
    CUDA graph when that is on (``weights``: Dynamo's argument position -> weight). Also hands the
    baked weights (``graph_weights``: graph input position -> tensor) to the guard filter of this compile."""
    record_baked_weights([graph_weights[i] for i in per_call.get("baked_inputs", ()) if i in graph_weights])
    called = compiled
    plan = per_call.get("direct")
    direct = None if plan is None or trees else _direct.direct_callable(
        plan, {rt.key: rt for rt in runtimes})
    if direct is not None:
        logger.debug("hybrid_trt: graph %d calls its %d delegate call(s) directly", report.graph_index,
                     len(plan.steps))
        report.per_call = "direct"
        called = direct
    if called is None or not whole:
        return called
    # A weight whose value lives only inside engines is never read through its pointer: only the others are checked.
    baked = {id(graph_weights[i]) for i in per_call.get("baked_inputs", ()) if i in graph_weights}
    read = [i for i, w in weights.items() if id(w) not in baked]
    return _whole_graph(called, per_call.get("whole_graph_reasons"), sorted(weights), read, report)


def _whole_graph(called, reasons, static: list, read: list, report: CompileReport):
    """``called`` in the whole runner's CUDA graph (whole_graph.py), or as it is where the compile found reasons
    it cannot be captured whole (said once, and in the report)."""
    if reasons is None:
        reasons = ["the stored graph's manifest does not say whether it can be captured whole"]
    report.cuda_graphs = cudagraphs.whole_runner_record(reasons)
    if reasons:
        logger.warning("hybrid_trt: graph %d runs without CUDA graphs: %s (cuda_graph_runner='trees' captures the "
                       "segments around such parts)", report.graph_index, "; ".join(reasons))
        return called
    return WholeGraph(called, static, f"graph {report.graph_index}", report.cuda_graphs.uncaptured, checked=read)


def _hybrid_graph(gm: fx.GraphModule, weights: dict, n_dynamo_inputs: int, opts: Options,
                  report: CompileReport, store, policy: Policy, loaded: dict, continues: bool = False):
    """The partitions of ``gm`` that stay delegated, built. ``continues``: the user's call goes on after this graph
    (Dynamo ended it at a graph break), so nothing delegated here is the call's last work (placement.py)."""
    t0 = time.perf_counter()
    canonicalize_attention(gm)
    sizes_from_inputs(gm)
    constants = _constants(gm, weights, n_dynamo_inputs)
    delegate_objs = [_delegates.get_delegate(n) for n in opts.resolved_delegates()]
    plan = partition_graph(gm.graph, delegate_objs, opts.min_block_size, opts.force_inductor_ops, frozenset(constants))
    reasons = dict(plan.inductor_reasons)
    work = sum(map(_launches_work, gm.graph.nodes))
    built: list = []  # (partition, extracted, runtime, placement candidate)
    for k, part in enumerate(plan.partitions):
        ex = extract(part, constants)
        views_to_reshapes(ex.module)  # its inputs may arrive with other strides than traced
        in_metas = [n.meta["val"] for n in ex.tensor_inputs]
        out_metas = [n.meta["val"] for n in ex.outputs]
        symbolic = bool(ex.size_inputs) or any(_is_symbolic(m) for m in in_metas + out_metas)
        preport = PartitionReport(
            index=k, delegate=part.delegate, op_count=part.op_count,
            ops=dict(Counter(op_name(n) for n in part.nodes if classify(n) is NodeKind.OP)),
            input_shapes=[_shape(m) for m in in_metas], output_shapes=[_shape(m) for m in out_metas])
        report.partitions.append(preport)
        device = _device_of(in_metas, ex)
        delegate = _delegates.get_delegate(part.delegate)
        try:
            runtime = prepare_runtime(
                name=f"partition {k}", module=ex.module, delegate=part.delegate,
                delegate_options=delegate.options_from(opts), device=device, input_metas=in_metas,
                n_sizes=len(ex.size_inputs), symbolic=symbolic, policy=policy, store=store, report=preport,
                loaded=loaded)
        except Exception as e:  # noqa: BLE001 - DelegateBuildError, or any bug on the way to an engine
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
        shares_graph = continues or work > sum(map(_launches_work, part.nodes))
        built.append((part, ex, runtime,
                      _placement.Candidate(runtime, ex.module, in_metas, symbolic, preport, shares_graph)))
    whys = [None] * len(built)
    timed = [i for i, (*_, c) in enumerate(built) if opts.measures_placement(c.runtime.device)]
    if timed:
        placed = _placement.place([built[i][3] for i in timed], opts.cuda_graphs, opts.strict, store)
        for i, why in zip(timed, placed):
            whys[i] = why
    delegated: list[_Delegated] = []
    for (part, ex, runtime, candidate), why in zip(built, whys):
        if why is not None:
            candidate.report.status = "placed on Inductor"
            for n in part.nodes:
                if classify(n) is NodeKind.OP:
                    reasons[n] = why
            continue
        delegated.append(_Delegated(part.nodes, ex, runtime.key, runtime, candidate.report))
    report.inductor_ops = [InductorOp(n.name, op_name(n), why) for n, why in reasons.items()]
    if not plan.partitions:
        _warn_if_declined_whole(report)
    for d in delegated:
        keep_traced_strides(gm, d.nodes, d.extracted.outputs)
    report.partition_seconds = time.perf_counter() - t0
    return delegated


def _ends_at_graph_break(gm: fx.GraphModule) -> bool:
    """Whether Dynamo ended this graph at a graph break, so the same call runs more after it (Python, other graphs).
    Dynamo records why it compiled a graph on the module it hands the backend; a graph compiled at the frame's
    return, or not from Dynamo (export), has no break."""
    reason = getattr(gm, "compile_subgraph_reason", None)
    return bool(getattr(reason, "graph_break", False))


def _launches_work(node: fx.Node) -> bool:
    """An op that runs kernels (a view only reinterprets its input's memory): what placement asks of a
    partition's graph outside it."""
    return classify(node) is NodeKind.OP and not getattr(node.target, "is_view", False)


def _warn_as_stored(report: CompileReport) -> None:
    """A compile served from the cache warns as the compile that stored it did (a graph declined whole, a partition
    that fell back): a warm process is no place for a silent fallback. Placement's choices were never warnings."""
    if not report.partitions:
        _warn_if_declined_whole(report)
    for k, p in enumerate(report.partitions):
        if p.status == "fell back to Inductor":
            why = next((e for e in reversed(p.events) if e.startswith("fell back to Inductor")), "see its report")
            logger.warning("hybrid_trt: graph %d: partition %d (%s, %d ops) runs on Inductor, as when this graph "
                           "was compiled and cached: %s", report.graph_index, k, p.delegate, p.op_count, why)


def _warn_if_declined_whole(report: CompileReport) -> None:
    """A graph none of whose ops a delegate takes because of the model's dtype or device (a bfloat16 model, a CPU
    model with a GPU-only delegate) runs as plain Inductor: the user asked for delegation, so it is said once,
    with the reason, instead of only in the report."""
    declined = Counter(op.reason for op in report.inductor_ops if declined_for_dtype_or_device(op.reason))
    if declined:
        reason, _count = declined.most_common(1)[0]
        logger.warning("hybrid_trt: graph %d: no op delegated (%d of %d declined: %s); it runs as plain Inductor "
                       "(README, 'Status and limits')", report.graph_index, sum(declined.values()),
                       len(report.inductor_ops), reason)


def _stitched(gm: fx.GraphModule, delegated: list, aot_inputs, report: CompileReport) -> fx.GraphModule:
    """The graph Inductor compiles: ``delegated`` partitions as delegate calls, the rest decomposed."""
    t0 = time.perf_counter()
    stitched = _decompose_for_inductor(views_to_reshapes(stitch(gm, delegated)), aot_inputs)
    _keep_output_strides_meta(gm, stitched)
    report.partition_seconds += time.perf_counter() - t0
    return stitched


# Set by Inductor's compile_fx on the graph it hands inner_compile: which outputs the user sees and their eager
# strides, which Inductor then keeps (its layout optimisation may pick channels-last for a convolution). A
# re-traced graph has a fresh output node without them, and its outputs would come back in Inductor's layout.
_OUTPUT_STRIDES_META = ("user_visible_output_idxs", "original_output_strides")


def _keep_output_strides_meta(source: fx.GraphModule, target: fx.GraphModule) -> None:
    """In place: ``target`` (the same outputs, stitched and re-traced) gets ``source``'s output-stride meta."""
    (src,), (dst,) = source.graph.find_nodes(op="output"), target.graph.find_nodes(op="output")
    for key in _OUTPUT_STRIDES_META:
        if key in src.meta:
            dst.meta[key] = src.meta[key]


def _route_back(d: "_Delegated", why: str, warn: bool, report: CompileReport) -> None:
    """Partition ``d`` was built but runs through Inductor after all (see stitch/fallback.py)."""
    d.report.status = "fell back to Inductor"
    d.report.events.append(f"routed back to Inductor: {why}")
    report.inductor_ops.extend(InductorOp(n.name, op_name(n), f"routed back to Inductor ({d.report.delegate})")
                               for n in d.nodes if classify(n) is NodeKind.OP)
    if warn:
        logger.warning("hybrid_trt: partition %d (%s, %d ops) routed back to Inductor: %s", d.report.index,
                       d.report.delegate, d.report.op_count, why)


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
    from torch.fx.experimental.proxy_tensor import make_fx

    fake_mode = detect_fake_mode(aot_inputs)
    with fake_mode, enable_python_dispatcher():
        return make_fx(gm, decomposition_table=inductor_decompositions(), tracing_mode="real",
                       _allow_non_fake_inputs=False)(*aot_inputs)


def _is_symbolic(meta) -> bool:
    return isinstance(meta, torch.Tensor) and any(not isinstance(s, int) for s in meta.shape)


def _shape(meta) -> list:
    return [str(s) if not isinstance(s, int) else s for s in meta.shape] if isinstance(meta, torch.Tensor) else []


def _device_of(in_metas, ex) -> torch.device:
    for m in in_metas:
        return m.device
    for name in ex.constant_names:
        return getattr(ex.module, name).device
    return torch.device("cpu")


def _hold(compiled, runtimes: list):
    """``compiled`` holding the runtimes its delegate calls resolve to (the key registry's references are weak).

    Held by the innermost function: compile_fx returns Dynamo-disabled wrappers, and Dynamo unwraps those to the
    innermost one (``innermost_fn``) before it wraps the graph again, dropping anything hung on the outer."""
    from torch._dynamo.eval_frame import innermost_fn
    try:
        innermost_fn(compiled)._hybrid_trt_runtimes = runtimes
    except AttributeError:
        compiled = _KeepAlive(compiled, runtimes)
    return compiled


def _boxed(gm: fx.GraphModule):
    from torch._functorch.aot_autograd import make_boxed_func
    return make_boxed_func(gm.forward)


class _KeepAlive:
    def __init__(self, fn, keep):
        self._fn, self._keep = fn, keep
        # Same calling convention as the wrapped function (AOTAutograd calls boxed functions with one list).
        self._boxed_call = getattr(fn, "_boxed_call", False)

    def __call__(self, *args):
        return self._fn(*args)


def _inductor_alone(gm: fx.GraphModule, example_inputs, opts: Options):
    """Inductor's compile of ``gm``, with its caches off when hybrid_trt's are (``cache=False``)."""
    # The backward of a training graph is compiled at the first backward call, after this returns: compile_fx
    # re-applies config_patches to the inner compile for that (Inductor's autotuning, opts.inductor_patches),
    # and with caching off each inner compile (forward and backward) puts its files in a directory removed at exit
    # (scratch.py).
    if opts.cache:
        return compile_fx(gm, example_inputs, config_patches=opts.inductor_patches)
    return compile_fx(gm, example_inputs, inner_compile=_files_removed_at_exit(compile_fx_inner),
                      config_patches={**opts.inductor_patches, "force_disable_caches": True})


def _files_removed_at_exit(inner_compile):
    @functools.wraps(inner_compile)
    def compile_in_scratch(*args, **kwargs):
        with inductor_files_removed_at_exit():
            return inner_compile(*args, **kwargs)
    return compile_in_scratch
