"""Measured placement: with ``placement="measured"``, a partition stays with its delegate only where the delegate
runs it faster than Inductor does.

A delegate supporting a partition does not make it faster there: on the H200, ONNX Runtime's CUDA-provider fp16
kernels took 2-3x Inductor's time at batch 16 (benchmarks/results/cudagraphs_h200.md), so a hybrid graph of such
partitions loses to plain Inductor however thin the calls around them are. Capability says what *can* be
delegated; this pass, between building the engines and stitching, decides what *should* be, by timing both on
the partition's own shapes (as Collage places subgraphs by measurement). Every partition it moves keeps the
timings as its recorded reason in the report.

What is timed, per static partition: its engine (``PartitionRuntime.run``) against Inductor's compile of the
partition's FX module alone, on inputs of its traced shapes (random floats, zero integers: an index of 0 is in
range for any non-empty dimension). On a GPU under CUDA graphs the host's launch work disappears at replay, so
there the *device* time is compared (a spin kernel queued first keeps the GPU busy while the host enqueues, and
events around the call time its kernels alone; a partition that must run outside the graphs is timed again by
wall time, ``rejudge_outside_graphs``); otherwise the wall time of a synchronised call. The device time of an
uncaptured ONNX Runtime run came out above its replayed time (H200: EfficientNet-B0's whole-model partition 1.26
ms against 0.77 ms for ONNX Runtime's own CUDA graph of the model), probably host time let in where the run
synchronises: a partition that is only slightly faster on the delegate can be moved to Inductor. Inductor is
chosen only when it beats the delegate by ``MARGIN``: a near tie stays with the delegate the user asked for.

What it does not see (so the choice can be wrong by about the size of these): Inductor fusing the partition with
its neighbours inside the whole graph, and the boundary copies either side. Partitions with symbolic shapes are
not measured (their engine is built per shape at run time) and stay delegated, with that said in the report.

Verdicts are stored in the engine store beside the engine, under the engine's content key (which covers the
versions and the GPU), the timing kind and the settings Inductor's side runs under (TF32, CPU threads), so a warm
start does not time again. Timing noise makes the verdict a
property of the machine it ran on: an exported package keeps the export machine's placement.
"""
from __future__ import annotations

import dataclasses
import hashlib
import statistics
import time
from typing import Callable, Optional, Sequence

import torch

from .log import logger
from .partitioner.capability import NodeKind, classify, op_name
from .report import InductorOp

MARGIN = 1.05  # Inductor must be this much faster to take a partition from its delegate
_WARMUP = 3
_MIN_SAMPLES = 7
_MAX_SAMPLES = 60
_BUDGET_S = 0.5  # per partition, both callables together, after warm-up


class InductorSideFailed(RuntimeError):
    """The partition could not be timed on Inductor's side: the delegate keeps it, whatever ``strict`` says (strict
    is about delegates failing)."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The measured choice for one partition: ``placed`` is "delegate" or "inductor"."""
    placed: str
    delegate_ms: float
    inductor_ms: float
    timing: str  # "wall" | "device"
    stored: bool = False  # read from the engine store (measured by an earlier process)

    def text(self) -> str:
        faster = "Inductor" if self.placed == "inductor" else "the delegate"
        return (f"measured ({self.timing} time{', stored' if self.stored else ''}): delegate "
                f"{self.delegate_ms:.3f} ms, Inductor {self.inductor_ms:.3f} ms per call; kept on {faster}")


def decide(runtime, module: torch.fx.GraphModule, in_metas: list, symbolic: bool, timing: str, strict: bool,
           store, preport) -> Optional[str]:
    """Why the built partition goes to Inductor instead, or None (it stays delegated). The timings, or why there
    are none, go to its report row (``preport.placement``) either way."""
    if symbolic:
        preport.placement = "not measured: symbolic shapes (engines are built per shape at run time)"
        return None
    try:
        verdict = measure(runtime, module, in_metas, timing, store)
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


def rejudge_outside_graphs(delegated: list, capture, cuda_graphs: bool, strict: bool, store, report) -> list:
    """Under CUDA graphs ``decide`` compared device time, as if every partition were replayed. One that must run
    outside the graphs (``capture.uncapturable``) pays its host time at every call: it is timed again by wall
    time, and goes to Inductor (inside the graphs) when Inductor wins that comparison. Returns the partitions that
    stay delegated."""
    if not capture.uncapturable:
        return delegated
    kept = []
    for d in delegated:
        rt = d.runtime
        # (one whose verdict was by wall time already, e.g. on the CPU, is not timed again)
        if rt.key not in capture.uncapturable or timing_kind(rt.device, cuda_graphs) == "wall":
            kept.append(d)
            continue
        metas = [n.meta["val"] for n in d.extracted.tensor_inputs]
        why = decide(rt, d.extracted.module, metas, rt.symbolic, "wall", strict, store, d.report)
        if why is None:
            kept.append(d)
            continue
        capture.uncapturable.pop(rt.key)
        d.report.status = "placed on Inductor"
        report.inductor_ops.extend(InductorOp(n.name, op_name(n), why) for n in d.nodes
                                   if classify(n) is NodeKind.OP)
    return kept


def timing_kind(device: torch.device, cuda_graphs: bool) -> str:
    return "device" if device.type == "cuda" and cuda_graphs else "wall"


def measure(runtime, module: torch.fx.GraphModule, input_metas: Sequence[torch.Tensor], timing: str, store
            ) -> Verdict:
    """The verdict for a built static partition: read from ``store``, else timed (and stored).

    Raises when either side cannot run; the caller keeps the partition delegated and records why."""
    key = _verdict_key(runtime.key, timing, runtime.device)
    stored = _stored(store, key)
    if stored is not None:
        return stored
    from torch._guards import tracing
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    # Inside the outer compile (Dynamo's fake mode and tracing context): this compile and these runs are real,
    # and must not touch the outer compile's context (AOTAutograd reads its parameters from it).
    with unset_fake_temporarily(), tracing(None), torch.no_grad():
        # A generator of its own: the user's random stream is left as it was (export does not restore it).
        generator = torch.Generator(device=runtime.device).manual_seed(0)
        inputs = [_example(m, runtime.device, generator) for m in input_metas]
        try:
            with inductor_config.patch({"triton.cudagraphs": False}):
                compiled = compile_fx(module, inputs)
        except Exception as e:  # noqa: BLE001 - no comparison to make; not the delegate's failure
            raise InductorSideFailed(f"Inductor could not compile the partition alone: {type(e).__name__}: {e}") \
                from e
        delegate_ms, inductor_ms = _time_pair(lambda: runtime.run(inputs, ()), lambda: compiled(*inputs),
                                              runtime.device, timing)
    report = getattr(runtime, "report", None)
    if report is not None and report.status != "delegated":  # the first-call guard replaced the engine
        raise RuntimeError("the engine failed its first call and fell back to Inductor: the delegate side timed "
                           "was that fallback (no verdict stored)")
    placed = "inductor" if inductor_ms * MARGIN < delegate_ms else "delegate"
    verdict = Verdict(placed, delegate_ms, inductor_ms, timing)
    _store(store, key, verdict)
    return verdict


def _example(meta: torch.Tensor, device: torch.device, generator: torch.Generator) -> torch.Tensor:
    shape = tuple(int(s) for s in meta.shape)
    if meta.dtype.is_floating_point or meta.dtype.is_complex:
        return torch.randn(shape, device=device, generator=generator).to(meta.dtype)
    return torch.zeros(shape, dtype=meta.dtype, device=device)


def _time_pair(delegate: Callable, inductor: Callable, device: torch.device, timing: str) -> tuple:
    """Median milliseconds per call of each, sampled alternately (drift in the machine's load hits both)."""
    cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)  # its device, not the current one
    host_ms = []
    for fn in (delegate, inductor):
        for i in range(_WARMUP):
            t0 = time.perf_counter()
            fn()
            sync()
            # Not a first call: its one-time work (module loads, an engine's cold runs, cuDNN's algorithm search)
            # can take seconds, and the spin sized from it would hold the GPU that long at every sample.
            if i:
                host_ms.append((time.perf_counter() - t0) * 1e3)
    sample = _device_sampler(max(host_ms), device) if timing == "device" else _wall_sampler(sync)
    times: tuple = ([], [])
    start = time.perf_counter()
    while len(times[0]) < _MAX_SAMPLES and (len(times[0]) < _MIN_SAMPLES or time.perf_counter() - start < _BUDGET_S):
        for fn, out in zip((delegate, inductor), times):
            out.append(sample(fn))
    return statistics.median(times[0]), statistics.median(times[1])


def _wall_sampler(sync: Callable) -> Callable:
    def sample(fn):
        t0 = time.perf_counter()
        fn()
        sync()
        return (time.perf_counter() - t0) * 1e3
    return sample


def _device_sampler(host_ms: float, device: torch.device) -> Callable:
    """Device time of one call: a spin kernel queued first holds the stream while the host enqueues the call, so
    the events around it time its kernels back to back, as a CUDA graph replays them. (A delegate that
    synchronises at the end of its run waits for the spin, then the end event follows at once.)"""
    with torch.cuda.device(device):
        torch.cuda._sleep(1000)  # its first launch loads the kernel: a calibration including that runs short
        torch.cuda.synchronize(device)
        probe_start, probe_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        probe_start.record()
        torch.cuda._sleep(10_000_000)
        probe_end.record()
        probe_end.synchronize()
        cycles_per_ms = 10_000_000 / max(probe_start.elapsed_time(probe_end), 1e-3)
    spin = int(cycles_per_ms * (2 * host_ms + 1.0))

    def sample(fn):
        with torch.cuda.device(device):  # the spin and the events on its stream, whichever device is current
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            torch.cuda._sleep(spin)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
    return sample


def _verdict_key(engine_key: str, timing: str, device: torch.device) -> str:
    # Besides the engine's key: the process settings Inductor's side runs under and the engine's key does not hold
    # (TF32 in fp32 matmuls and cuDNN convolutions; CPU kernels' thread count).
    settings = f"matmul {torch.get_float32_matmul_precision()}"
    settings += f" cudnn tf32 {torch.backends.cudnn.allow_tf32}" if device.type == "cuda" else \
        f" threads {torch.get_num_threads()}"
    return hashlib.sha256(f"placement {MARGIN} {timing} {settings} {engine_key}".encode()).hexdigest()


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
        return Verdict(str(meta["placed"]), float(meta["delegate_ms"]), float(meta["inductor_ms"]),
                       str(meta["timing"]), stored=True)
    except (KeyError, TypeError, ValueError):
        return None


def _store(store, key: str, verdict: Verdict) -> None:
    try:
        store.put(key, {}, {"kind": "placement", "placed": verdict.placed, "delegate_ms": verdict.delegate_ms,
                            "inductor_ms": verdict.inductor_ms, "timing": verdict.timing})
    except Exception as e:  # noqa: BLE001 - storing is best effort; the verdict holds for this compile
        logger.debug("hybrid_trt: placement verdict not stored: %s", e)
