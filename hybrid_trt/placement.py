"""Measured placement: with ``placement="measured"`` (and by default, ``"auto"``, for GPU partitions:
``Options.measures_placement``), a partition stays with its delegate only where the delegate runs it faster than
Inductor does.

A delegate supporting a partition does not make it faster there: on the H200, ONNX Runtime's CUDA-provider fp16
kernels took 2-3x Inductor's time at batch 16 (benchmarks/results/cudagraphs_h200.md), so a hybrid graph of such
partitions loses to plain Inductor however thin the calls around them are. Capability says what *can* be
delegated; this pass, between building the engines and stitching, decides what *should* be, by timing both on
the partition's own shapes (as Collage places subgraphs by measurement). Every partition it moves keeps the
timings as its recorded reason in the report.

What is timed, per partition: its engine (``PartitionRuntime.run``) against Inductor's compile of the
partition's FX module alone (our opaque ops decomposed back, as the stitched graph has them), on inputs of its
traced shapes (random floats, zero integers: an index of 0 is in range for any non-empty dimension). Without CUDA
graphs both sides are timed by the wall time of a synchronised call. Under CUDA graphs (on a GPU) the host's launch work disappears at replay, and so do most of the GPU's
gaps between kernels: Inductor's side is captured in a CUDA graph here and timed by the device time of its
replay (its device time uncaptured, timing.py, where the capture fails), and the delegate's side by what it will
cost there. A capture-safe engine is replayed: the capture probe (capture_probe.py), which every engine passes
under CUDA graphs anyway, times its captured replay in its own process. (Inductor's side timed uncaptured
over-counted it: on the H200, MobileNetV3-Large fp32 batch 1 read 0.755 ms where its kernels took 0.650 ms of
GPU time inside Inductor's own CUDA graph, so ONNX Runtime's 0.735 ms replay was kept and the model ran 1.05x
Inductor's reduce-overhead; benchmarks/results/cudagraphs_h200.md, session 16. The device time of an uncaptured
ONNX Runtime run over-counted the delegate the same way: ResNet-18 fp32 batch 16 read 3.34 ms where ONNX
Runtime's own CUDA graph of the model replays in 2.83, and went to Inductor.) An engine that must run outside the graphs pays its host time at every call: it is timed by
wall time. Without CUDA graphs Inductor is chosen only when it beats the delegate by ``MARGIN``: a near tie stays
with the delegate the user asked for. Under CUDA graphs it is the other way round, the delegate must beat
Inductor by ``MARGIN``: at equal kernel time a delegated partition still costs the replay more (its kernels on a
stream of their own joined by events, more graph nodes; on the H200 the example detector's partition, 0.258
against Inductor's 0.261 ms of GPU time, made the replay 0.378 against 0.363 ms).

A delegate whose uncaptured runs block the host until their GPU work is done (``Delegate.host_synchronizes``:
ONNX Runtime's CUDA provider ends every run with a host synchronisation) costs a call more than its own time
when other work of its graph runs outside it: while it runs, the host cannot queue that work, and when it
returns, the GPU has nothing queued. Timing the partition alone cannot see that, and on the H200 it decided the
rows where a partly delegated graph lost to Inductor (the LiDAR example's dense partition kept at 1.49 against
Inductor's 2.03 ms alone, and the whole call 1.01-1.08x Inductor's; the R-CNN detectors, FCOS;
benchmarks/results/sparse_spconv_h200.md, conformance_h200.md). Such a partition is charged its wall time once
more, the most overlap it can take from the rest of the call: it stays delegated only where it is about twice as
fast as Inductor. A partition that is its graph's whole work is not charged (nothing of that graph waits for
it), unless Dynamo ended the graph at a graph break (the call goes on after it: the torchvision detectors' FCOS
and Mask R-CNN rows kept whole graphs on ONNX Runtime and stayed slower than Inductor, conformance_h200.md run
Q), nor is one a CUDA graph replays (a captured run does not synchronise).

What it does not see (so the choice can be wrong by about the size of these): Inductor fusing the partition with
its neighbours inside the whole graph, the boundary copies either side, and, for the synchronisation, how much
of the rest of the call would really have overlapped (the charge is its upper bound), and work after a graph
that Dynamo compiled as a frame of its own (a function the caller goes on from is a frame that simply returns).
A partition with symbolic shapes is measured at the shape Dynamo traced it with (its sizes' example values, the
shape its lowering and key use): its engine for that shape is the one the first call of that shape runs, and
Inductor's side is compiled for it. The verdict holds for every shape of the partition. Left delegated unmeasured,
such partitions were what kept the torchvision detectors slower than Inductor on the H200 once every static
partition had been measured (FCOS: the only two partitions still delegated, 41 of 1296 ops, both symbolic, and
1.24x Inductor's time; Mask R-CNN six of seven; conformance_h200.md run R).

Verdicts are stored in the engine store beside the engine, under the engine's content key (which covers the
versions and the GPU), whether CUDA graphs are on, whether the partition is liable to the synchronisation charge
(other work of the call outside it, and a delegate that synchronises: the same engine can be a graph's whole work
elsewhere), and the settings Inductor's side runs under (TF32, CPU threads), so a warm start does not time
again. Timing noise makes the verdict a property of the machine it ran
on: an exported package keeps the export machine's placement.
"""
from __future__ import annotations

import dataclasses
import hashlib
import statistics
import time
from typing import Callable, Optional, Sequence

import torch

from .capture.preserve import inductor_decompositions
from .engines.shapes import hint_shapes
from .log import logger
from .timing import device_sampler, wall_sampler

MARGIN = 1.05  # how much faster a side must be to win a near tie: Inductor without CUDA graphs, the delegate under
_WARMUP = 3
_MIN_SAMPLES = 7
_MAX_SAMPLES = 60
_BUDGET_S = 0.5  # per partition, both callables together, after warm-up
_HOW = {"wall": "wall time", "device": "device time", "replay": "device time of its captured replay"}


class InductorSideFailed(RuntimeError):
    """The partition could not be timed on Inductor's side: the delegate keeps it, whatever ``strict`` says (strict
    is about delegates failing)."""


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A built partition, as placement sees it."""
    runtime: object  # PartitionRuntime
    module: torch.fx.GraphModule
    input_metas: list  # its tensor inputs' traced values
    symbolic: bool
    report: object  # its PartitionReport
    shares_graph: bool = False  # other work of its graph (ops that launch kernels) runs outside it, or after it


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The measured choice for one partition: ``placed`` is "delegate" or "inductor"."""
    placed: str
    delegate_ms: float
    inductor_ms: float
    delegate_timing: str  # "wall" | "replay" (device time of its captured replay, measured by the capture probe)
    inductor_timing: str  # "wall" | "device" | "replay" (device time of its captured replay)
    stored: bool = False  # read from the engine store (measured by an earlier process)
    sync_charge_ms: float = 0.0  # added to the delegate's time for its host synchronisation (module doc)
    traced_shape: str = ""  # a symbolic partition's: the shape it was measured at (module doc)

    def text(self) -> str:
        faster = "Inductor" if self.placed == "inductor" else "the delegate"
        charge = (f" + {self.sync_charge_ms:.3f} ms for its host synchronisation (the rest of the call waits)"
                  if self.sync_charge_ms else "")
        at = f" at its traced shape {self.traced_shape}" if self.traced_shape else ""
        return (f"measured{' (stored)' if self.stored else ''}{at}: delegate {self.delegate_ms:.3f} ms "
                f"({_HOW[self.delegate_timing]}){charge}, Inductor {self.inductor_ms:.3f} ms "
                f"({_HOW[self.inductor_timing]}) per call; kept on {faster}")


def place(candidates: Sequence[Candidate], cuda_graphs: bool, strict: bool, store) -> list:
    """Per candidate: why it goes to Inductor instead, or None (it stays delegated). Under CUDA graphs the
    engines to be replayed are probed first, all in one capture-probe process (whose verdicts the capture plan
    then reuses)."""
    probes = _probe_for_replay(candidates, cuda_graphs, store)
    return [decide(c, cuda_graphs, strict, store, probes.get(c.runtime.key)) for c in candidates]


def _probe_for_replay(candidates: Sequence[Candidate], cuda_graphs: bool, store) -> dict:
    """Engine key -> capture probe result, for the CUDA engines a replay could time (declared capture-safe, no
    stored verdict)."""
    todo = []
    for c in candidates:
        rt = c.runtime
        if not (cuda_graphs and rt.device.type == "cuda") or \
                _stored(store, _verdict_key(rt.key, True, rt.device, liable_to_sync_charge(rt, c.shares_graph))):
            continue
        if rt.delegate.capture_unsafe_reason(rt.device, rt.delegate_options) is None:
            # Probed at the traced shape, as the capture plan probes it.
            todo.append((rt, c.input_metas, _size_metas(c.module, c.input_metas) if c.module is not None else []))
    if not todo:
        return {}
    from .cudagraphs import probe_engines
    try:
        return probe_engines(todo, time_replay=True)
    except Exception as e:  # noqa: BLE001 - no replay times: the engines are timed by wall time instead
        logger.warning("hybrid_trt: the capture probe for placement failed (%s: %s); delegates are timed by wall "
                       "time", type(e).__name__, e)
        return {}


def timings(device: torch.device, cuda_graphs: bool, probe) -> tuple:
    """(delegate's, Inductor's) timing kinds; ``probe``: the engine's capture probe result, or None."""
    if device.type != "cuda" or not cuda_graphs:
        return "wall", "wall"
    if probe is not None and probe.reason is None and probe.replay_ms is not None:
        return "replay", "replay"
    return "wall", "replay"  # the engine runs outside the graphs: it pays its host time at every call


def liable_to_sync_charge(runtime, shares_graph: bool) -> bool:
    """Whether the partition pays for its host synchronisation whenever its engine runs uncaptured (module doc):
    its delegate blocks the host on this GPU, and other work of the call runs outside it (in its graph, or after
    the graph break that ends it). Part of the verdict's key: it does not depend on how the engine is timed, so a
    warm start that skips the capture probe finds the verdict the probe's timing gave."""
    return shares_graph and runtime.device.type == "cuda" \
        and runtime.delegate.host_synchronizes(runtime.device, runtime.delegate_options)


def sync_charged(runtime, delegate_timing: str, shares_graph: bool) -> bool:
    """Whether this measurement charges the synchronisation: liable, and the engine runs uncaptured (wall time)."""
    return delegate_timing == "wall" and liable_to_sync_charge(runtime, shares_graph)


def decide(c: Candidate, cuda_graphs: bool, strict: bool, store, probe=None) -> Optional[str]:
    """Why the built partition goes to Inductor instead, or None (it stays delegated). The timings, or why there
    are none, go to its report row (``placement``) either way."""
    preport = c.report
    try:
        verdict = measure(c.runtime, c.module, c.input_metas, store, cuda_graphs, probe, c.shares_graph)
    except Exception as e:  # noqa: BLE001 - the partition stays with its delegate; the report says why
        if preport.status != "delegated":  # its engine failed the first call (and fell back): route it now
            return f"engine failed its first call at compile time ({preport.delegate})"
        if strict and not isinstance(e, InductorSideFailed):
            raise
        preport.placement = f"not measured: {type(e).__name__}: {e}"
        logger.warning("hybrid_trt: partition %d (%s): placement not measured, it stays delegated: %s",
                       preport.index, preport.delegate, e)
        return None
    if preport.status != "delegated":
        return f"engine failed its first call at compile time ({preport.delegate})"
    preport.placement = verdict.text()
    logger.info("hybrid_trt: partition %d (%s, %d ops): placement %s", preport.index, preport.delegate,
                preport.op_count, verdict.text())
    return f"placement {verdict.text()}" if verdict.placed == "inductor" else None


def measure(runtime, module: torch.fx.GraphModule, input_metas: Sequence[torch.Tensor], store,
            cuda_graphs: bool = False, probe=None, shares_graph: bool = False) -> Verdict:
    """The verdict for a built partition (a symbolic one at its traced shape): read from ``store``, else timed (and
    stored). ``probe``: its capture probe result under CUDA graphs (``cudagraphs.ProbeResult``), which holds its
    replay time;
    ``shares_graph``: other work of the call runs outside it, in its graph or after the graph break that ends it
    (see the module doc on host synchronisation).

    Raises when either side cannot run; the caller keeps the partition delegated and records why."""
    key = _verdict_key(runtime.key, cuda_graphs, runtime.device, liable_to_sync_charge(runtime, shares_graph))
    stored = _stored(store, key)
    if stored is not None:
        return stored
    delegate_timing, inductor_timing = timings(runtime.device, cuda_graphs, probe)
    charged = sync_charged(runtime, delegate_timing, shares_graph)
    from torch._guards import tracing
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    # Inside the outer compile (Dynamo's fake mode and tracing context): this compile and these runs are real,
    # and must not touch the outer compile's context (AOTAutograd reads its parameters from it).
    with unset_fake_temporarily(), tracing(None), torch.no_grad():
        # A generator of its own: the user's random stream is left as it was (export does not restore it).
        generator = torch.Generator(device=runtime.device).manual_seed(0)
        shapes, sizes = hint_shapes(input_metas, len(_size_metas(module, input_metas)), module)
        inputs = [_example(m, shape, runtime.device, generator) for m, shape in zip(input_metas, shapes)]
        try:
            with inductor_config.patch({"triton.cudagraphs": False}):
                compiled = compile_fx(module, [*inputs, *sizes], decompositions=inductor_decompositions())
        except Exception as e:  # noqa: BLE001 - no comparison to make; not the delegate's failure
            raise InductorSideFailed(f"Inductor could not compile the partition alone: {type(e).__name__}: {e}") \
                from e
        delegate = None if delegate_timing == "replay" else (lambda: runtime.run(inputs, sizes))
        inductor = lambda: compiled(*inputs, *sizes)  # noqa: E731
        if inductor_timing == "replay":
            captured = _captured(inductor, runtime.device)
            if captured is None:
                inductor_timing = "device"
            else:
                inductor = captured[0].replay
        delegate_ms, inductor_ms = _time_pair(delegate, inductor, runtime.device, delegate_timing,
                                              "device" if inductor_timing == "replay" else inductor_timing)
    if delegate is None:
        delegate_ms = float(probe.replay_ms)
    report = getattr(runtime, "report", None)
    if report is not None and report.status != "delegated":  # the first-call guard replaced the engine
        raise RuntimeError("the engine failed its first call and fell back to Inductor: the delegate side timed "
                           "was that fallback (no verdict stored)")
    charge = delegate_ms if charged else 0.0
    placed = _placed(delegate_ms + charge, inductor_ms, cuda_graphs and runtime.device.type == "cuda")
    traced = _shape_text(shapes, sizes) if runtime.symbolic else ""
    verdict = Verdict(placed, delegate_ms, inductor_ms, delegate_timing, inductor_timing, sync_charge_ms=charge,
                      traced_shape=traced)
    _store(store, key, verdict)
    return verdict


def _size_metas(module: torch.fx.GraphModule, input_metas: Sequence) -> list:
    """The traced values of a partition's size arguments, which follow its tensor inputs (its module is
    ``forward(*tensors, *sizes)``): SymInts of a symbolic partition, none for a static one."""
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    return [n.meta["val"] for n in placeholders[len(input_metas):]]


def _shape_text(shapes, sizes) -> str:
    text = ", ".join("x".join(map(str, s)) or "scalar" for s in shapes)
    return text + (f" (sizes {list(sizes)})" if sizes else "")


def _placed(delegate_ms: float, inductor_ms: float, replayed: bool) -> str:
    """Which side a partition goes to: a near tie stays with the delegate, except in a CUDA graph's replay
    (``replayed``), where it goes to Inductor (module doc)."""
    if replayed:
        return "delegate" if delegate_ms * MARGIN < inductor_ms else "inductor"
    return "inductor" if inductor_ms * MARGIN < delegate_ms else "delegate"


def _captured(fn: Callable, device: torch.device):
    """(graph, outputs): ``fn``'s work captured in a CUDA graph after two warm-up runs, its outputs kept alive for
    the replays; None when it cannot be captured (the caller then times it uncaptured).

    On a stream of ``device``'s own, warm-up included: torch.cuda.graph's default capture stream is made on
    whichever device was current at the process's first capture. The caller's current stream is restored
    whatever happens: when a capture fails at its end, torch.cuda.graph leaves the thread on its capture stream."""
    caller = torch.cuda.current_stream(device)
    stream = torch.cuda.Stream(device)
    try:
        with torch.cuda.device(device):
            stream.wait_stream(caller)  # the inputs were made on the caller's stream
            with torch.cuda.stream(stream):
                fn()
                fn()
            torch.cuda.synchronize(device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                outputs = fn()
        return graph, outputs
    except Exception as e:  # noqa: BLE001 - timed uncaptured instead; the report says "device time"
        logger.debug("hybrid_trt: Inductor's side not captured for placement (%s: %s)", type(e).__name__, e)
        return None
    finally:
        torch.cuda.set_stream(caller)


def _example(meta: torch.Tensor, shape: tuple, device: torch.device, generator: torch.Generator) -> torch.Tensor:
    if meta.dtype.is_floating_point or meta.dtype.is_complex:
        return torch.randn(shape, device=device, generator=generator).to(meta.dtype)
    return torch.zeros(shape, dtype=meta.dtype, device=device)


def _time_pair(delegate: Optional[Callable], inductor: Callable, device: torch.device, delegate_timing: str,
               inductor_timing: str) -> tuple:
    """Median milliseconds per call of each, sampled alternately (drift in the machine's load hits both).
    ``delegate`` None: only Inductor's side is timed (the delegate's is its replay time); its median is NaN."""
    cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)  # its device, not the current one
    sides = [(fn, how) for fn, how in ((delegate, delegate_timing), (inductor, inductor_timing)) if fn is not None]
    host_ms = []
    for fn, _how in sides:
        for i in range(_WARMUP):
            t0 = time.perf_counter()
            fn()
            sync()
            # Not a first call: its one-time work (module loads, an engine's cold runs, cuDNN's algorithm search)
            # can take seconds, and the spin sized from it would hold the GPU that long at every sample.
            if i:
                host_ms.append((time.perf_counter() - t0) * 1e3)
    samplers = {"wall": wall_sampler(sync)}
    if any(how == "device" for _fn, how in sides):
        samplers["device"] = device_sampler(max(host_ms), device)
    times: dict = {id(fn): [] for fn, _how in sides}
    start = time.perf_counter()
    while len(times[id(inductor)]) < _MAX_SAMPLES and (len(times[id(inductor)]) < _MIN_SAMPLES
                                                       or time.perf_counter() - start < _BUDGET_S):
        for fn, how in sides:
            times[id(fn)].append(samplers[how](fn))
    delegate_ms = statistics.median(times[id(delegate)]) if delegate is not None else float("nan")
    return delegate_ms, statistics.median(times[id(inductor)])


def _verdict_key(engine_key: str, cuda_graphs: bool, device: torch.device, liable: bool = False) -> str:
    # Besides the engine's key: whether it runs under CUDA graphs (what is timed), whether it is liable to the
    # synchronisation charge (liable_to_sync_charge, not whether this timing charged it), and the process settings
    # Inductor's side runs under (TF32 in fp32 matmuls and cuDNN convolutions; CPU kernels' thread count): the
    # engine's key holds only the delegate's own settings. "placement 4": verdicts before it timed Inductor's side
    # with our attention/interpolate ops left opaque (a bias towards the delegate), and are measured again.
    settings = f"matmul {torch.get_float32_matmul_precision()}"
    settings += f" cudnn tf32 {torch.backends.cudnn.allow_tf32}" if device.type == "cuda" else \
        f" threads {torch.get_num_threads()}"
    graphs = "graphs" if cuda_graphs and device.type == "cuda" else "plain"
    sync = " sync-liable" if liable else ""  # the same engine may be a graph's whole work in another graph
    return hashlib.sha256(f"placement 4 {MARGIN} {graphs}{sync} {settings} {engine_key}".encode()).hexdigest()


def _stored(store, key: str) -> Optional[Verdict]:
    try:
        entry = store.get(key)
    except Exception as e:  # noqa: BLE001 - a damaged verdict is measured again
        logger.debug("hybrid_trt: stored placement verdict unreadable (%s); measuring again", e)
        return None
    if entry is None:
        return None
    meta = entry.meta
    try:
        verdict = Verdict(str(meta["placed"]), float(meta["delegate_ms"]), float(meta["inductor_ms"]),
                          str(meta["delegate_timing"]), str(meta["inductor_timing"]), stored=True,
                          sync_charge_ms=float(meta.get("sync_charge_ms", 0.0)),
                          traced_shape=str(meta.get("traced_shape", "")))
    except (KeyError, TypeError, ValueError):
        return None
    return verdict if verdict.delegate_timing in _HOW and verdict.inductor_timing in _HOW else None


def _store(store, key: str, verdict: Verdict) -> None:
    try:
        store.put(key, {}, {"kind": "placement", "placed": verdict.placed, "delegate_ms": verdict.delegate_ms,
                            "inductor_ms": verdict.inductor_ms, "delegate_timing": verdict.delegate_timing,
                            "inductor_timing": verdict.inductor_timing,
                            "sync_charge_ms": verdict.sync_charge_ms, "traced_shape": verdict.traced_shape})
    except Exception as e:  # noqa: BLE001 - storing is best effort; the verdict holds for this compile
        logger.debug("hybrid_trt: placement verdict not stored: %s", e)
