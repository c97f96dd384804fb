"""The ladder that makes a graph compile whatever its delegated partitions do (unless ``strict``).

A partition whose lowering, build or first call fails is handled by its runtime. What remains can fail only once
the partitions are put together, so this module walks down from "every built partition delegated" to "plain
Inductor", one step at a time, each step with one warning naming what it gave up and why:

1. stitch every built partition in and re-trace the graph for Inductor;
2. if that fails: add the partitions back one at a time, routing those that break it back to Inductor;
3. if Inductor fails on a graph that calls delegates: the same graph with every partition routed back;
4. if Inductor fails on that too: the stitched graph runs as an FX graph (delegates, then eager ATen ops).

Callers supply the steps' mechanics (how to stitch, compile, run as FX, route a partition back), so the ladder
does not depend on how partitions are keyed or built.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch.fx as fx

from ..log import error_text, logger

Stitch = Callable[[Sequence], fx.GraphModule]  # delegated partitions -> graph for Inductor


def compile_stitched(parts: Sequence, *, stitch: Stitch, compile: Callable, as_fx: Callable,
                     route_back: Callable[[object, str, bool], None], original: fx.GraphModule, strict: bool,
                     report) -> tuple[Callable, list]:
    """The compiled graph and the partitions it delegates. ``route_back(part, why, warn)`` records that ``part``
    runs through Inductor after all (in the report, and with a warning if ``warn``); ``original`` is the graph
    before stitching, which ``as_fx`` runs when not even the plain graph can be prepared for Inductor."""
    try:
        graph, kept = _stitch_what_works(list(parts), stitch, route_back, strict, report)
    except Exception as e:  # noqa: BLE001 - the graph without delegates failed to re-trace
        if strict:
            raise
        for part in parts:
            route_back(part, f"the graph could not be prepared for Inductor: {error_text(e)}", False)
        return _as_fx(original, [], as_fx, e, report)
    try:
        return compile(graph), kept
    except Exception as e:  # noqa: BLE001 - every failure has a next step
        if strict:
            raise
        if not kept:
            return _as_fx(graph, kept, as_fx, e, report)
        logger.warning("hybrid_trt: Inductor failed on graph %d with %d delegated partition(s); compiling it "
                       "again with them routed back to Inductor: %s", report.graph_index, len(kept), error_text(e))
        inductor_error = e
    try:
        plain = compile(stitch([]))
    except Exception as e:  # noqa: BLE001
        return _as_fx(graph, kept, as_fx, e, report)
    for part in kept:
        route_back(part, f"Inductor failed on the stitched graph: {error_text(inductor_error)}", False)
    report.inductor_status = "compiled without delegates (Inductor failed on the stitched graph)"
    return plain, []


def _stitch_what_works(parts: list, stitch: Stitch, route_back, strict: bool, report) -> tuple[fx.GraphModule, list]:
    try:
        return stitch(parts), parts
    except Exception as e:  # noqa: BLE001
        if strict or not parts:
            raise
        logger.warning("hybrid_trt: stitching graph %d with %d delegated partition(s) failed; retrying them one "
                       "at a time: %s", report.graph_index, len(parts), error_text(e))
    kept: list = []
    graph = None
    for part in parts:
        try:
            graph = stitch(kept + [part])
        except Exception as e:  # noqa: BLE001
            route_back(part, f"stitching failed: {error_text(e)}", True)
            continue
        kept.append(part)
    return (graph if kept else stitch([])), kept


def _as_fx(graph: fx.GraphModule, kept: list, as_fx: Callable, error: Exception, report):
    report.inductor_status = f"ran as FX graph (Inductor failed: {error_text(error)})"
    logger.warning("hybrid_trt: Inductor failed on graph %d, running it as an FX graph: %s", report.graph_index,
                   error_text(error))
    return as_fx(graph), kept

