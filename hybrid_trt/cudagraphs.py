"""CUDA graphs for the whole stitched callable: ``mode="reduce-overhead"`` or ``options={"cuda_graphs": True}``.

The stitched graph (Inductor's kernels and every delegate call) is compiled by Inductor with its own CUDA-graph
trees switched on, exactly as ``torch.compile(mode="reduce-overhead")`` does for plain Inductor: one graph per
input shape, recorded after a warm-up call and replayed afterwards; inputs copied into static buffers (weights
and other static inputs are not copied); outputs living in the graph's memory pool until the next replay.
Nothing here re-implements capture: this module only decides which delegate calls may be captured, tells
Inductor, and reports what Inductor did. The other runner, ``cuda_graph_runner="whole"``, is whole_graph.py: it
captures the whole compiled callable itself where that is the whole call, and this module gives it the verdict
(``_compiled_for_whole_runner``) and the capture checks.

- Each delegate declares whether its engines can be captured on a device (``Delegate.capture_unsafe_reason``).
  Every engine is also probed once at compile time (a partition with symbolic sizes at its size hints), in a
  separate process (capture_probe.py: a failed capture of a foreign runtime can leave a process broken): warm-up
  runs (so the first-call fallback and the delegate's own lazy allocations happen outside any capture), one
  capture on a throwaway graph whose nodes are inspected, a replay on new data checked against an uncaptured
  run, and timed replays (measured placement, which probes first, reads them; the plan reuses its verdicts).
  A capture that succeeds is not enough: a host-function node (``cudaLaunchHostFunc`` during capture) runs
  again at every replay. ONNX Runtime's CUDA provider enqueues one at the end of any run whose kernels staged
  data in pinned CPU memory (its deferred release of those buffers, which owns and deletes its own
  bookkeeping): replaying it frees the same memory again, corrupting the heap, and the process aborts later
  (seen on the H200 when compiled models were torn down). A partition that is not capture-safe is called
  through ``hybrid_trt::delegate_uncapturable``, the same op carrying ``torch.Tag.cudagraph_unsafe``: Inductor's graph
  partitioning (switched on with the graphs) then captures the segments around it and runs it between them.
- Inductor's own reasons to capture less (CPU ops, data-dependent sizes, input mutation, ...) are taken from its
  compile result and its ``cudagraphs`` log, and land in ``CompileReport.cuda_graphs`` next to ours.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import statistics
import time
from collections import Counter
from typing import Optional

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .engines import op as _delegate_op
from .engines.shapes import hint
from .log import error_text, first_line, logger
from .report import CudaGraphRecord

# torch.compile modes: what each means for hybrid_trt. "default" never reaches the backend (torch drops it).
MODES = {"default": {}, "reduce-overhead": {"cuda_graphs": True},
         "max-autotune": {"cuda_graphs": True, "max_autotune": True},
         "max-autotune-no-cudagraphs": {"max_autotune": True}}

_LIB = torch.library.Library("hybrid_trt", "FRAGMENT")
_LIB.define("delegate_uncapturable(str key, Tensor[] inputs, SymInt[] sizes) -> Tensor[]",
            tags=(torch.Tag.cudagraph_unsafe,))
_LIB.impl("delegate_uncapturable", _delegate_op._run, "CompositeExplicitAutograd")
torch.library.register_fake("hybrid_trt::delegate_uncapturable", _delegate_op._fake, lib=_LIB)

delegate_uncapturable = torch.ops.hybrid_trt.delegate_uncapturable.default


# ---------------------------------------------------------------------------------------------- options


def options_with_mode(options, mode: Optional[str]):
    """``options`` (dict, Options or None) with torch.compile's ``mode`` applied (``MODES``: CUDA graphs, Inductor's
    autotuning). Raises ValueError for an unknown mode, and where the options say otherwise (never drops one)."""
    if mode is None:
        return options
    if mode not in MODES:
        raise ValueError(f"hybrid_trt: unknown torch.compile mode={mode!r}; valid: {list(MODES)} "
                         "(or options={'cuda_graphs': True, 'max_autotune': True})")
    settings = MODES[mode]
    from .options import Options
    if isinstance(options, Options):
        return dataclasses.replace(options, **settings)
    options = dict(options or {})
    for key in settings:
        if options.get(key) in (False, "0", "false", "no", "off"):
            raise ValueError(f"hybrid_trt: mode={mode!r} asks for {key}=True but options say {key}=False; drop one "
                             "of them")
    return {**options, **settings}


def inductor_config(trees: bool) -> dict:
    """Inductor settings for the stitched graph: with ``trees`` (Options.inductor_cuda_graphs) its CUDA-graph
    trees, and graph partitioning so that an uncapturable piece splits the capture instead of cancelling it."""
    if not trees:
        return {}
    from torch._inductor import config
    patch = {"triton.cudagraphs": True}
    if hasattr(config, "graph_partition"):
        patch["graph_partition"] = True
    return patch


# ---------------------------------------------------------------------------------------------- compile time


@dataclasses.dataclass
class CapturePlan:
    """Which delegated partitions (by content key) must stay outside CUDA graphs, and why."""
    enabled: bool
    whole: bool = False  # hybrid_trt's whole-callable runner (whole_graph.py) instead of Inductor's trees
    uncapturable: dict = dataclasses.field(default_factory=dict)  # key -> reason

    def apply(self, gm: fx.GraphModule) -> fx.GraphModule:
        """In place: calls of uncapturable partitions become ``delegate_uncapturable`` calls."""
        changed = False
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target is _delegate_op.delegate \
                    and node.args[0] in self.uncapturable:
                node.target = delegate_uncapturable
                changed = True
        if changed:
            gm.recompile()
        return gm


def plan_capture(delegated, enabled: bool, whole: bool) -> CapturePlan:
    """``delegated``: the partitions about to be stitched in (``runtime``, ``extracted``, ``report``); ``enabled``
    and ``whole``: Options.cuda_graphs and Options.whole_runner."""
    plan = CapturePlan(enabled=enabled, whole=enabled and whole)
    if not plan.enabled:
        return plan
    reasons = capture_verdicts(delegated)
    for d in delegated:
        rt = d.runtime
        reason = reasons.get(rt.key)
        if reason is not None:
            plan.uncapturable[rt.key] = reason
            d.report.events.append(f"outside CUDA graphs: {reason}")
            logger.info("hybrid_trt: %s runs outside CUDA graphs: %s", rt.name, reason)
    return plan


def capture_verdicts(delegated) -> dict:
    """Engine key -> why that partition's engine cannot be captured (capture-safe partitions are absent): the
    delegate's declaration, then the capture probe for each CUDA engine declared safe. CPU engines are absent:
    CPU work is Inductor's to keep out of its graphs (it reports it), and a graph's CPU ops are ``blockers``'."""
    reasons, to_probe = {}, []
    for d in delegated:
        rt = d.runtime
        reason = rt.delegate.capture_unsafe_reason(rt.device, rt.delegate_options)
        if reason is not None:
            reasons[rt.key] = reason
        elif rt.device.type == "cuda":
            to_probe.append((rt, [n.meta["val"] for n in d.extracted.tensor_inputs],
                             [n.meta["val"] for n in d.extracted.size_inputs]))
    reasons.update({k: r.reason for k, r in probe_engines(to_probe).items() if r.reason is not None})
    return reasons


def package_reasons(delegated, stitched: fx.GraphModule, device: torch.device) -> list:
    """Why an exported package's graph cannot be replayed whole from one CUDA graph (empty: it can), decided
    at export, where the engines are built, and kept in its manifest for ``hybrid_trt.load(cuda_graphs=True)``:
    the partitions' verdicts (declared, and probed in a separate process) and the stitched graph's blockers."""
    if device.type != "cuda":
        return ["the package runs on the CPU (CUDA graphs capture CUDA work only)"]
    try:
        partitions = capture_verdicts(delegated)
    except Exception as e:  # noqa: BLE001 - the check failing never fails the export: the package runs uncaptured
        logger.warning("hybrid_trt: could not check whether the package can be captured in CUDA graphs: %s",
                       error_text(e))
        return [f"the capture check failed at export: {error_text(e)}"]
    reasons = [f"{d.runtime.name}: {partitions[d.runtime.key]}" for d in delegated if d.runtime.key in partitions]
    return _dedupe(reasons + list(blockers(stitched, CapturePlan(enabled=True, whole=True))))


def probe_engines(entries, time_replay: bool = False) -> dict:
    """Engine key -> ``ProbeResult`` for ``entries`` of (runtime, tensor input values, size input values), traced
    and possibly symbolic (probed at their size hints), all in one capture-probe process. ``time_replay``: also
    time the replays of those cleared (for measured placement)."""
    if not entries:
        return {}
    from .capture_probe import probe_isolated
    with unset_fake_temporarily():
        return probe_isolated([(rt, [_hinted(m) for m in metas], [hint(s) for s in sizes])
                               for rt, metas, sizes in entries], time_replay)


def _hinted(meta: torch.Tensor) -> torch.Tensor:
    """A meta-device stand-in with the size hints of a (possibly symbolic) fake tensor: shape and dtype only."""
    return torch.empty(tuple(hint(s) for s in meta.shape), dtype=meta.dtype, device="meta")


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """What the capture probe found for one engine at one input signature."""
    reason: Optional[str]  # why it must run outside CUDA graphs; None: capture-safe
    replay_ms: Optional[float] = None  # capture-safe: device time of one replay of its captured run


def _probe(runtime, inputs, sizes=(), time_replay: bool = False) -> ProbeResult:
    """Whether a run of the engine can be captured and replayed, and (``time_replay``) how long a replay takes on
    the device. Run in the capture probe's own process (capture_probe.py) on real ``inputs``: two uncaptured runs
    (the engine's first call, lazy set-up and allocations), one capture on a throwaway graph whose nodes are
    inspected, a replay on new input data compared with an uncaptured run of the same data, then timed replays
    (what measured placement compares Inductor with: placement.py)."""
    if runtime.device.type != "cuda":
        runtime.run(inputs, sizes)
        return ProbeResult("the engine runs on the CPU (CUDA graphs capture CUDA work only)")
    checked = _capture_check(runtime, inputs, sizes)
    if isinstance(checked, str):
        return ProbeResult(checked)
    graph, _static = checked  # its replays read those inputs: they stay allocated until the timing is done
    return ProbeResult(None, _replay_ms(graph, runtime.device) if time_replay else None)


def _replay_ms(graph, device: torch.device) -> Optional[float]:
    """Median device time of a replay (the spin of timing.device_sampler hides the launch, as inside a replayed
    hybrid graph); None when it could not be timed (placement then times the engine uncaptured, by wall time)."""
    from .timing import device_sampler
    try:
        t0 = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize(device)
        sample = device_sampler((time.perf_counter() - t0) * 1e3, device)
        return statistics.median(sample(graph.replay) for _ in range(_TIMED_REPLAYS))
    except Exception as e:  # noqa: BLE001 - the capture was checked; only its timing is missing
        logger.debug("hybrid_trt: replay not timed: %s", e)
        return None


_TIMED_REPLAYS = 15


def _capture_check(runtime, inputs, sizes):
    """The captured graph, replayed once and checked, with the inputs it reads; or why it cannot be used (a str)."""
    try:
        runtime.run(inputs, sizes)  # the first call: engine-side lazy set-up and allocations, fallback check
        runtime.run(inputs, sizes)
        torch.cuda.synchronize(runtime.device)
    except Exception as e:  # noqa: BLE001 - the runtime's own fallback rules apply at the real call
        return f"warm-up run failed: {error_text(e)}"
    if runtime.report.status != "delegated" or any("fell back" in e for e in runtime.report.events):
        return "the partition fell back to Inductor (a separately compiled function)"
    static = [t.clone() for t in inputs]
    graph = _inspectable_graph()
    try:
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            captured = runtime.run(static, sizes)
    except Exception as e:  # noqa: BLE001 - a capture failure only means: run it between the captured parts
        return f"capture of its engine failed: {error_text(e)}"
    reason = _unreplayable(graph)
    if reason is not None:
        return reason  # never replayed: a host node's callback must not run
    for t in static:
        if t.dtype.is_floating_point:
            t.copy_(torch.randn(t.shape, device=t.device).to(t.dtype))
    graph.replay()
    expected = runtime.run([t.clone() for t in static], sizes)
    torch.cuda.synchronize(runtime.device)
    for i, (got, want) in enumerate(zip(captured, expected)):
        if not torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2, equal_nan=True):
            diff = (got.float() - want.float()).abs().nan_to_num(0.0).max().item()
            return f"its replay on new inputs differs from an uncaptured run (output {i}, max |diff| {diff:.3g})"
    return graph, static


# Node types of a captured graph that cannot be replayed safely (CUgraphNodeType, cuda.h): a host function is
# a CPU callback that runs again at every replay. Kernels, copies, memsets, events, stream-ordered allocations
# and child graphs replay as captured.
_HOST_NODE, _CHILD_GRAPH_NODE = 3, 4


def _inspectable_graph() -> "torch.cuda.CUDAGraph":
    """A graph that keeps its cudaGraph_t after capture, so ``raw_cuda_graph`` can be inspected (torch >= 2.8)."""
    try:
        return torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:
        return torch.cuda.CUDAGraph()


def _unreplayable(graph) -> Optional[str]:
    """Why the captured ``graph`` must not be replayed, or None. When its nodes cannot be read (no
    ``raw_cuda_graph`` in this torch, no CUDA driver library found), it cannot be cleared: it is refused."""
    try:
        types = graph_node_types(graph.raw_cuda_graph())
    except Exception as e:  # noqa: BLE001 - an uninspectable capture is not trusted
        return f"its captured run could not be inspected for host-function nodes ({error_text(e)})"
    if types.get(_HOST_NODE):
        return (f"its captured run contains {types[_HOST_NODE]} host-function node(s) (a CPU callback, e.g. "
                "onnxruntime releasing pinned staging buffers), which every replay would run again")
    return None


def graph_node_types(raw_graph: int) -> Counter:
    """CUgraphNodeType -> count over a cudaGraph_t and its child graphs, read through the CUDA driver API."""
    cuda = _driver()
    counts: Counter = Counter()
    pending = [raw_graph]
    while pending:
        g = ctypes.c_void_p(pending.pop())
        n = ctypes.c_size_t(0)
        _check(cuda.cuGraphGetNodes(g, None, ctypes.byref(n)), "cuGraphGetNodes")
        nodes = (ctypes.c_void_p * max(n.value, 1))()
        _check(cuda.cuGraphGetNodes(g, nodes, ctypes.byref(n)), "cuGraphGetNodes")
        for node in nodes[:n.value]:
            kind = ctypes.c_int(-1)
            _check(cuda.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)), "cuGraphNodeGetType")
            counts[kind.value] += 1
            if kind.value == _CHILD_GRAPH_NODE:
                child = ctypes.c_void_p()
                _check(cuda.cuGraphChildGraphNodeGetGraph(ctypes.c_void_p(node), ctypes.byref(child)),
                       "cuGraphChildGraphNodeGetGraph")
                pending.append(child.value)
    return counts


def _driver():
    cuda = ctypes.CDLL("libcuda.so.1")  # loaded already by the CUDA runtime torch uses
    for name in ("cuGraphGetNodes", "cuGraphNodeGetType", "cuGraphChildGraphNodeGetGraph"):
        getattr(cuda, name).restype = ctypes.c_int
    return cuda


def _check(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"{what} returned CUDA driver error {code}")


# ---------------------------------------------------------------------------------------------- report


class _SkipLog(logging.Filter):
    """Collects Inductor's 'skipping cudagraphs due to ...' lines for the report instead of printing them."""

    def __init__(self):
        super().__init__()
        self.messages: list = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.messages.append(_skip_reason(record.getMessage()))
        return False


@contextlib.contextmanager
def compiling(enabled: bool, trees: bool):
    """Around compile_fx with CUDA graphs ``enabled``: Inductor's CUDA-graph settings (its trees where ``trees``),
    and its skip messages caught (yields their list)."""
    if not enabled:
        yield []
        return
    from torch._inductor import cudagraph_utils
    skip_log = _SkipLog()
    log = cudagraph_utils.cudagraphs_log
    log.addFilter(skip_log)
    try:
        with torch._inductor.config.patch(inductor_config(trees)):
            yield skip_log.messages
    finally:
        log.removeFilter(skip_log)


def with_graphs(compile_inductor, report, gm: fx.GraphModule):
    """``compile_inductor`` run under ``compiling`` with Inductor's trees; Inductor's skip messages join
    ``report.cuda_graphs``. ``gm``: the graph Dynamo captured, read when Inductor's cache serves the compile
    (nothing is compiled to inspect)."""
    def run():
        with compiling(True, True) as skipped:
            compiled = compile_inductor()
        if report.cuda_graphs is None and _on_cpu_only(gm):  # served by Inductor's cache, and nothing to capture
            logger.warning("hybrid_trt: graph %d: CUDA graphs were asked for (%s), but %s; it runs uncaptured",
                           report.graph_index, ASKED, CPU_ONLY)
            report.cuda_graphs = CudaGraphRecord("not captured", 0, [CPU_ONLY])
        elif report.cuda_graphs is None:  # Inductor's cache served the graph: nothing was compiled to inspect
            report.cuda_graphs = CudaGraphRecord("unknown (compiled graph served by Inductor's cache)", 0, [])
        elif skipped:
            report.cuda_graphs.reasons = _dedupe(report.cuda_graphs.reasons + [f"Inductor: {m}" for m in skipped])
        return compiled
    return run


def compile_observed(compile_graph, gm: fx.GraphModule, cudagraphs_box, plan: CapturePlan, report):
    """``compile_graph()`` (Inductor on the stitched graph ``gm``), recording in ``report.cuda_graphs`` what it
    captured: ``cudagraphs_box`` is the BoxedBool Inductor clears when it skips the graphs, and its compiled
    graph's ``partition_maps`` are the captured segments."""
    if not plan.enabled:
        return compile_graph()
    reasons = list(blockers(gm, plan))  # before Inductor's passes rewrite gm
    on_cpu = CPU_ONLY in reasons
    if on_cpu:  # asked for, and nothing to capture: said once per graph, not only in the report
        logger.warning("hybrid_trt: graph %d: CUDA graphs were asked for (%s), but %s; it runs uncaptured",
                       report.graph_index, ASKED, CPU_ONLY)
    if plan.whole:
        return _compiled_for_whole_runner(compile_graph, gm, reasons, report)
    with torch._inductor.config.patch(_data_dependent_split(gm)):
        compiled = compile_graph()
    captured = bool(cudagraphs_box) if cudagraphs_box is not None else False
    partition_maps = getattr(compiled, "partition_maps", None)
    for why in (getattr(compiled, "disabled_cudagraphs_reason", None),
                *(getattr(getattr(compiled, "cudagraph_info", None), "cudagraph_fail_reasons", None) or ())):
        if why and not on_cpu:  # on the CPU Inductor's own words ("multiple devices") only confuse
            reasons.append(f"Inductor: {_skip_reason(why)}")
    if not captured or (partition_maps is not None and len(partition_maps) == 0):
        status, segments = "not captured", 0
    elif partition_maps and len(partition_maps) > 1:
        status, segments = f"captured in {len(partition_maps)} segments", len(partition_maps)
    elif reasons:
        status, segments = "captured in 1 segment", 1
    else:
        status, segments = "captured whole", 1
    report.cuda_graphs = CudaGraphRecord(status, segments, _dedupe(reasons))
    logger.info("hybrid_trt: graph %d CUDA graphs: %s%s", report.graph_index, status,
                f" ({'; '.join(report.cuda_graphs.reasons)})" if report.cuda_graphs.reasons else "")
    return compiled


def _compiled_for_whole_runner(compile_graph, gm: fx.GraphModule, reasons: list, report):
    """Inductor's plain compile of ``gm``, and in ``report.cuda_graphs`` whether the whole runner may capture it:
    ``reasons`` (what blockers found) plus what AOTAutograd's runtime wrapper would do beyond passing arguments
    in and outputs out (input mutation, aliased outputs...: a replay would not do it). Called while AOTAutograd
    compiles (its metadata is read from the tracing context)."""
    from .stitch.direct import aot_wrapper_reason
    compiled = compile_graph()
    outputs = gm.graph.output_node().args[0]
    why = aot_wrapper_reason(len(outputs) if isinstance(outputs, (tuple, list)) else -1)
    if why is not None:
        reasons = reasons + [f"AOTAutograd's wrapper handles {why}"]
    report.cuda_graphs = whole_runner_record(reasons)
    return compiled


def whole_runner_record(reasons: list) -> CudaGraphRecord:
    return (CudaGraphRecord("not captured", 0, _dedupe(reasons)) if reasons else
            CudaGraphRecord("captured whole (hybrid_trt's runner, from the second call of each input shape)", 1, []))


def _data_dependent_split(gm: fx.GraphModule) -> dict:
    """Inductor setting that keeps every tensor whose size comes from a data-dependent (unbacked) size out of
    the captured segments. Without it, Inductor's graph partitioning put the first output of a multi-output op
    with data-dependent sizes (the LiDAR example's strided rulebook) inside a captured segment, whose warm-up then
    failed ("storage data ptrs are not allocated in pool"; pytorch/pytorch#172728 is the same class of bug). The
    setting names the ops that produce such sizes; torch versions without it get nothing."""
    from torch._inductor import config
    if not hasattr(config, "cudagraph_unsafe_unbacked_ops"):
        return {}
    ops = sorted({node.target.name() for node in gm.graph.nodes
                  if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
                  and node.meta.get("unbacked_bindings")})
    if not ops:
        return {}
    return {"cudagraph_unsafe_unbacked_ops": sorted(set(config.cudagraph_unsafe_unbacked_ops) | set(ops))}


CPU_ONLY = "the graph computes on the CPU (CUDA graphs capture CUDA work only)"
# What turns the graphs on (options.py): both modes that capture them, and the option
ASKED = "mode='reduce-overhead' or 'max-autotune', or the option cuda_graphs"


def _on_cpu_only(gm: fx.GraphModule) -> bool:
    """Whether every tensor Dynamo's graph ``gm`` traced (inputs and results) is on the CPU."""
    devices = {v.device.type for n in gm.graph.nodes for v in (n.meta.get("example_value"),)
               if isinstance(v, torch.Tensor)}
    return devices == {"cpu"}


def blockers(gm: fx.GraphModule, plan: CapturePlan):
    """Why parts of the stitched graph cannot be captured: our uncapturable partitions, ops Inductor treats as
    cudagraph-unsafe, data-dependent (unbacked) sizes, and ops on the CPU."""
    from torch._inductor.utils import is_cudagraph_unsafe_fx_node
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    devices: dict = {}  # device type -> ops producing tensors there
    sources: dict = {}  # op -> nodes of it that produce data-dependent (unbacked) sizes
    users_of_unbacked = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        val = node.meta.get("val")
        for v in (val if isinstance(val, (list, tuple)) else (val,)):
            if isinstance(v, torch.Tensor):
                devices[v.device.type] = devices.get(v.device.type, 0) + 1
        if node.target is delegate_uncapturable:
            yield f"partition {node.args[0][:12]}: {plan.uncapturable.get(node.args[0], 'not capture-safe')}"
        elif is_cudagraph_unsafe_fx_node(node):
            yield f"{node.name}: {node.target} is cudagraph-unsafe"
        elif node.meta.get("unbacked_bindings"):
            sources[str(node.target)] = sources.get(str(node.target), 0) + 1
        elif val is not None and free_unbacked_symbols(val):
            users_of_unbacked += 1
    if sources:
        made = ", ".join(f"{op} x{n}" for op, n in sources.items())
        yield f"data-dependent sizes from {made}; {users_of_unbacked} more op(s) on such sizes"
    if devices.get("cpu") and not devices.get("cuda"):
        yield CPU_ONLY
    elif devices.get("cpu"):
        yield f"{devices['cpu']} op(s) on the CPU"


def _dedupe(items: list) -> list:
    return list(dict.fromkeys(items))


def _skip_reason(why: str) -> str:
    """Inductor's reason for skipping graphs, on one line. Its 'multiple devices: ' lists the devices of its own
    kernels, none in a graph whose every op is delegated: said so instead of ending at the colon."""
    line = first_line(why).rstrip()
    return f"{line[:-1].rstrip()} (none of its kernels named one)" if line.endswith(":") else line


