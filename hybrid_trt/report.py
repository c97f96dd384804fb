"""What went where and why: per partition (delegate, ops, shapes, engines built or loaded and how long each
took, fallbacks) and per op left to Inductor (the reason). Available as data and printed as a table."""
from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from typing import Optional


@dataclasses.dataclass
class EngineRecord:
    signature: str  # input shapes (and size values) this engine is specialised to
    source: str  # "built" (lowered and built here) | "loaded" (from the engine store)
    seconds: float  # to get the engine ready: lowering + build, or store read + load
    lower_seconds: float = 0.0  # part of ``seconds`` spent lowering (a static partition is lowered to get its key)


@dataclasses.dataclass
class PartitionReport:
    index: int
    delegate: str
    op_count: int
    ops: dict  # op name -> count
    input_shapes: list
    output_shapes: list
    status: str = "delegated"  # delegated | fell back to Inductor | placed on Inductor (measured: placement.py)
    engines: list = dataclasses.field(default_factory=list)  # EngineRecord
    events: list = dataclasses.field(default_factory=list)  # fallbacks, bound reached, ...
    key: Optional[str] = None  # content key the stitched graph calls it by (engines/key.py)
    placement: Optional[str] = None  # placement="measured": the timings and the choice, or why not timed
    # Input shapes whose engine failed to build at run time (symbolic partitions build per shape): each runs
    # through the partition's Inductor fallback from then on (the events say why).
    shapes_on_inductor: int = 0

    @property
    def runs_delegated(self) -> bool:
        """Delegated, and not only in name: a partition every shape of which so far failed to build runs on
        Inductor."""
        return self.status == "delegated" and (bool(self.engines) or not self.shapes_on_inductor)

    @property
    def status_text(self) -> str:
        if self.status != "delegated" or not self.shapes_on_inductor:
            return self.status
        if not self.engines:
            return f"fell back to Inductor ({self.shapes_on_inductor} input shape(s), every one so far)"
        return f"delegated; {self.shapes_on_inductor} input shape(s) on Inductor"

    @property
    def build_seconds(self) -> float:
        """Seconds spent getting this partition's engines ready (built or loaded)."""
        return sum(e.seconds for e in self.engines)

    @property
    def engine_sources(self) -> str:
        """e.g. "built 1", "loaded 2", "built 1, loaded 1"."""
        counts = Counter(e.source for e in self.engines)
        return ", ".join(f"{src} {n}" for src, n in sorted(counts.items())) or "-"


@dataclasses.dataclass
class InductorOp:
    node: str
    op: str
    reason: str


@dataclasses.dataclass
class CudaGraphRecord:
    """What CUDA-graph capture (``cuda_graphs=True`` / ``mode="reduce-overhead"``) covers in one graph."""
    # "captured whole" (hybrid_trt's whole runner says so in brackets) | "captured whole for some input shapes" |
    # "captured in N segments" | "captured in 1 segment" | "not captured" | "unknown (...)" (Inductor's cache
    # served the compiled graph)
    status: str
    segments: int  # captured segments (Inductor graph partitions), 0 when not captured
    reasons: list = dataclasses.field(default_factory=list)  # why not whole: ours and Inductor's

    def uncaptured(self, why: str, others_captured: bool) -> None:
        """The whole runner's record of an input shape it runs uncaptured (whole_graph.WholeGraph's on_fallback)."""
        self.status = "captured whole for some input shapes" if others_captured else "not captured"
        self.segments = int(others_captured)
        self.reasons = list(dict.fromkeys(self.reasons + [why]))


@dataclasses.dataclass
class CompileReport:
    graph_index: int
    whole_graph_reason: Optional[str] = None  # set when the graph went to Inductor alone
    partitions: list = dataclasses.field(default_factory=list)
    inductor_ops: list = dataclasses.field(default_factory=list)
    inductor_status: str = "compiled"  # compiled | compiled without delegates (...) | ran as FX graph (Inductor failed)
    # A warm start: the stored graph manifest served this compile, so nothing was partitioned, lowered or
    # compiled; partitions and reasons come from the manifest, engines from the engine store.
    from_graph_manifest: bool = False
    # True when Inductor's AOTAutograd cache served the compiled graph (a warm start of a graph Inductor runs; a
    # graph called directly, per_call "direct", needs no Inductor code and skips Inductor altogether).
    from_inductor_cache: bool = False
    partition_seconds: float = 0.0
    cuda_graphs: Optional[CudaGraphRecord] = None  # None when CUDA graphs were not asked for
    # What Dynamo's frame calls: "direct" (a graph of delegate calls alone, called without Inductor's and
    # AOTAutograd's wrappers: stitch/direct.py) or "inductor" (Inductor's compiled graph)
    per_call: str = "inductor"

    @property
    def delegated_op_count(self) -> int:
        return sum(p.op_count for p in self.partitions if p.runs_delegated)

    @property
    def total_op_count(self) -> int:
        """Every op of the graph: those planned for a delegate (running there or not) and those left to Inductor."""
        return sum(p.op_count for p in self.partitions if p.status == "delegated") + len(self.inductor_ops)

    def to_inductor_alone(self, why: str) -> None:
        """Decided at call time: from now on the graph runs through Inductor alone, its partitions' ops counted as
        Inductor's, for ``why``."""
        self.whole_graph_reason = why
        for p in self.partitions:
            if p.status == "delegated":
                p.status = "fell back to Inductor"
                p.events.append(why)
                self.inductor_ops.extend(InductorOp("", op, why) for op, n in p.ops.items() for _ in range(n))

    def reasons(self) -> Counter:
        return Counter(op.reason for op in self.inductor_ops)

    def to_dict(self) -> dict:
        """The fields, and what the properties say (each partition's ``status_text``, the op counts)."""
        d = dataclasses.asdict(self)
        for part, part_dict in zip(self.partitions, d["partitions"]):
            part_dict["status_text"] = part.status_text
        d["delegated_op_count"], d["total_op_count"] = self.delegated_op_count, self.total_op_count
        return d

    def table(self) -> str:
        # A graph Inductor took whole was never partitioned: its ops were not counted, so no "0/0 ops".
        counted = not (self.whole_graph_reason and not self.partitions and not self.inductor_ops)
        lines = [f"hybrid_trt graph {self.graph_index}: "
                 + (f"{self.delegated_op_count}/{self.total_op_count} ops delegated in "
                    f"{sum(p.runs_delegated for p in self.partitions)} partition(s); " if counted
                    else "nothing delegated; ")
                 + f"Inductor: {self.inductor_status}"
                 f"{' (from its cache)' if self.from_inductor_cache else ''}"
                 f"{' (not needed: delegate calls only, served from the graph manifest)' if self.from_graph_manifest and not self.from_inductor_cache else ''}"]
        if self.whole_graph_reason:
            lines.append(f"  whole graph to Inductor: {self.whole_graph_reason}")
        if self.cuda_graphs is not None:
            lines.append(f"  CUDA graphs: {self.cuda_graphs.status}")
            lines.extend(f"      ! {why}" for why in self.cuda_graphs.reasons)
        if self.partitions:
            lines.append(f"  {'#':>3} {'delegate':<12} {'ops':>4} {'engines':<10} {'s':>7}  "
                         f"{'inputs -> outputs':<48} status")
            for p in self.partitions:
                shapes = f"{_shapes(p.input_shapes)} -> {_shapes(p.output_shapes)}"
                lines.append(f"  {p.index:>3} {p.delegate:<12} {p.op_count:>4} {p.engine_sources:<10} "
                             f"{p.build_seconds:>7.3f}  {shapes:<48} {p.status_text}")
                for e in p.engines:
                    lowered = f" (lowering {e.lower_seconds:.3f} s)" if e.lower_seconds else ""
                    lines.append(f"      engine [{_clip(e.signature)}]: {e.source} in {e.seconds:.3f} s{lowered}")
                if p.placement:
                    lines.append(f"      placement {p.placement}")
                for e in p.events:
                    lines.append(f"      ! {e}")
        if self.inductor_ops:
            lines.append("  ops left to Inductor (count, op, reason):")
            grouped = Counter((op.op, op.reason) for op in self.inductor_ops)
            for (op, reason), n in sorted(grouped.items(), key=lambda kv: -kv[1]):
                lines.append(f"    {n:>3} {op:<40} {reason}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _shapes(shapes) -> str:
    return _clip(", ".join("x".join(str(d) for d in s) if s else "scalar" for s in shapes))


def _clip(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


# Registry of the reports of every graph compiled in this process, in order.
_REPORTS: list = []
_LOCK = threading.Lock()


def new_report() -> CompileReport:
    with _LOCK:
        report = CompileReport(graph_index=len(_REPORTS))
        _REPORTS.append(report)
    return report


def discard_report(report: CompileReport) -> None:
    """Drop the report of a compile Dynamo abandoned (it restarts the trace and compiles again). Only the latest
    report is dropped, so the graph indices already shown stay right; one that another thread's compile has
    followed stays, saying what happened."""
    with _LOCK:
        if _REPORTS and _REPORTS[-1] is report:
            _REPORTS.pop()
        else:
            report.whole_graph_reason = "abandoned by Dynamo (it traced the frame again and compiled that)"


def reports() -> list:
    """Reports of every graph hybrid_trt compiled in this process (a model with graph breaks has several)."""
    with _LOCK:
        return list(_REPORTS)


def last_report() -> Optional[CompileReport]:
    with _LOCK:
        return _REPORTS[-1] if _REPORTS else None
