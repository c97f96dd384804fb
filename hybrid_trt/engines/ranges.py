"""One engine for a range of input shapes, where the lowered partition does not depend on the shape.

Lowering is per concrete shape: every size is a number in the ONNX graph. A partition is *shape-generic* along
its dynamic dimensions when lowering it at several shapes of the range gives the same graph except for the
input and output dimensions that vary: same nodes, same attributes, same initializers by content. Then one ONNX
model with symbolic dimensions (``dim_param``) serves the whole range: ONNX Runtime runs it at any size, and
TensorRT builds it with one optimization profile (min/opt/max from the range). The lowerings write sizes from
the partition's traced symbolic shapes where they can (Reshape/Expand targets: ``lowerings/ops/_util.py``;
Slice bounds, Resize scales or sizes, size-built constants: ``lowerings/ops/_dims.py``), so most partitions
lower to one graph. Where the graphs still differ (a Reshape target with two dynamic dims, an Expand of a
size-1 dim to a dynamic size, a bound or size no tensor of the partition has, a split along a dynamic dim),
the partition keeps one engine per listed shape, and ``first_difference`` says which node made the difference:
this comparison, not the lowerings, is what guarantees that a range engine is the same graph at every sample.

This module is pure computation on shapes and ONNX models (no delegate, no store): ``engines/runtime.py``
lowers, compares, builds and stores; the TensorRT delegate reads the profile from the model's metadata.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping, Optional, Sequence

import onnx

from .key import _canonical_structure, _tensor_data

# Metadata of a ranged model: {graph input name: [min shape, opt shape, max shape]} (TensorRT's profile).
PROFILE_KEY = "hybrid_trt.profile"


class NotRanged(Exception):
    """The partition cannot get one engine for its range; the message says why (recorded, not raised on)."""


@dataclasses.dataclass(frozen=True)
class RangePlan:
    """The range one engine covers: per symbol ``[min, opt, max]``, and per input (output) its dims, each an
    int or the name of a symbol (outputs: any size expression, used as the ONNX ``dim_param``)."""
    symbols: Mapping[str, tuple]  # name -> (min, opt, max)
    inputs: tuple  # per input: tuple of int | symbol name
    outputs: tuple  # per output: tuple of int | expression text

    def to_json(self) -> dict:
        return {"symbols": {k: list(v) for k, v in sorted(self.symbols.items())},
                "inputs": [list(s) for s in self.inputs], "outputs": [list(s) for s in self.outputs]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "RangePlan":
        return cls({k: tuple(int(x) for x in v) for k, v in data["symbols"].items()},
                   tuple(tuple(d) for d in data["inputs"]), tuple(tuple(d) for d in data["outputs"]))

    def text(self, name_ties: bool = False) -> str:
        """``[2..8]x3x16x16, [2..8]x6``: the input shapes the engine covers. ``name_ties``: a size several
        dimensions share (one symbol) is named, ``s0:[2..8]x3x16x16, s0:[2..8]x6`` (those must be equal)."""
        uses = [d for shape in self.inputs for d in shape if not isinstance(d, int)]

        def dim(d):
            if isinstance(d, int):
                return str(d)
            lo, _opt, hi = self.symbols[d]
            return f"{d}:[{lo}..{hi}]" if name_ties and uses.count(d) > 1 else f"[{lo}..{hi}]"
        return ", ".join("x".join(dim(d) for d in shape) for shape in self.inputs)

    def ties(self) -> bool:
        """Whether one symbol sizes more than one input dimension."""
        uses = [d for shape in self.inputs for d in shape if not isinstance(d, int)]
        return len(uses) != len(set(uses))

    def point(self, which: str) -> dict:
        """Symbol values at ``min``, ``opt`` or ``max``."""
        k = ("min", "opt", "max").index(which)
        return {name: bounds[k] for name, bounds in self.symbols.items()}

    def shapes_at(self, point: Mapping[str, int]) -> list[tuple]:
        return [tuple(d if isinstance(d, int) else int(point[d]) for d in shape) for shape in self.inputs]

    def covers(self, shapes: Sequence[Sequence[int]]) -> bool:
        """Whether concrete input ``shapes`` lie in the range (each symbol within its bounds, and the same
        value wherever it appears). Called once per new input signature, never per call."""
        if len(shapes) != len(self.inputs):
            return False
        seen: dict = {}
        for shape, dims in zip(shapes, self.inputs):
            if len(shape) != len(dims):
                return False
            for size, d in zip(shape, dims):
                if isinstance(d, int):
                    if size != d:
                        return False
                    continue
                lo, _opt, hi = self.symbols[d]
                if not lo <= size <= hi or seen.setdefault(d, size) != size:
                    return False
        return True

    def profile(self) -> list[tuple]:
        """Per input, (min shape, opt shape, max shape): TensorRT's optimization profile."""
        return [tuple(self.shapes_at(self.point(w))[i] for w in ("min", "opt", "max")) for i in range(len(self.inputs))]


def plan_range(input_dims: Sequence[Sequence], output_dims: Sequence[Sequence], size_exprs: Sequence,
               bounds: Mapping[str, tuple]) -> RangePlan:
    """The range of a partition whose input dims are ``input_dims`` (ints or sympy expressions), given the
    ``bounds`` (symbol name -> (min, opt, max)) the front end declared. Raises NotRanged."""
    inputs, used = [], set()
    for i, dims in enumerate(input_dims):
        shape = []
        for d, size in enumerate(dims):
            if isinstance(size, int):
                shape.append(size)
                continue
            if not getattr(size, "is_Symbol", False):
                raise NotRanged(f"input {i} dim {d} is the size expression {size}, not a dynamic dimension of "
                                "its own")
            name = str(size)
            if name not in bounds:
                raise NotRanged(f"input {i} dim {d} ({name}) has no declared finite range")
            shape.append(name)
            used.add(name)
        inputs.append(tuple(shape))
    for e in list(size_exprs) + [s for dims in output_dims for s in dims]:
        free = {str(s) for s in getattr(e, "free_symbols", ())}
        if free - used:
            raise NotRanged(f"size {e} depends on {sorted(free - used)}, which no input dimension carries "
                            "(a data-dependent or derived size)")
    outputs = tuple(tuple(s if isinstance(s, int) else _expr_text(s) for s in dims) for dims in output_dims)
    if not used:
        raise NotRanged("no input dimension is dynamic")
    return RangePlan({name: tuple(int(x) for x in bounds[name]) for name in sorted(used)}, tuple(inputs), outputs)


def _expr_text(expr) -> str:
    return str(expr).replace(" ", "")


def sample_points(plan: RangePlan) -> list[dict]:
    """Symbol values to lower the partition at: every symbol at its minimum, every one at its maximum, and,
    where the range has room, an interior point with a different value per symbol (two symbols that are
    equal at every sample would hide a graph that ties one to the other)."""
    names = sorted(plan.symbols)
    points = [plan.point("min"), plan.point("max")]
    interior = {}
    for k, name in enumerate(names):
        lo, _opt, hi = plan.symbols[name]
        if hi - lo >= 2:
            interior[name] = lo + 1 + (k * 7919) % (hi - lo - 1)
        else:
            interior[name] = lo
    points.append(interior)
    out = []
    for p in points:
        if p not in out:
            out.append(p)
    return out


def evaluate(size, point: Mapping[str, int]) -> int:
    """A size (int, or a sympy expression of the symbols) at ``point``."""
    if isinstance(size, int):
        return size
    import sympy
    value = size.xreplace({s: sympy.Integer(point[str(s)]) for s in size.free_symbols})
    return int(value)


def generic_model(model: onnx.ModelProto, plan: RangePlan) -> onnx.ModelProto:
    """``model`` (lowered at one point of the range) with the plan's dynamic dims as ``dim_param`` on its
    inputs and outputs, intermediate shape annotations dropped, and the TensorRT profile as metadata."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    for info, dims in zip(graph.input, plan.inputs):
        _set_dims(info, dims)
    for info, dims in zip(graph.output, plan.outputs):
        _set_dims(info, dims)
    del graph.value_info[:]
    profile = {info.name: [list(s) for s in shapes] for info, shapes in zip(graph.input, plan.profile())}
    for prop in list(out.metadata_props):
        if prop.key == PROFILE_KEY:
            out.metadata_props.remove(prop)
    out.metadata_props.add(key=PROFILE_KEY, value=json.dumps(profile, sort_keys=True))
    return out


def _set_dims(info: onnx.ValueInfoProto, dims: Sequence) -> None:
    shape = info.type.tensor_type.shape
    if len(shape.dim) != len(dims):
        raise NotRanged(f"{info.name} has rank {len(shape.dim)} in the lowered graph, {len(dims)} in the plan")
    for dim, d in zip(shape.dim, dims):
        if isinstance(d, int):
            if dim.HasField("dim_param") or dim.dim_value != d:
                raise NotRanged(f"{info.name}: a static dimension of the plan is {dim} in the lowered graph")
        else:
            dim.Clear()
            dim.dim_param = d


def profile_of(model: onnx.ModelProto) -> Optional[dict]:
    """The optimization profile ``generic_model`` recorded: {input name: (min, opt, max) shapes}, or None."""
    for prop in model.metadata_props:
        if prop.key == PROFILE_KEY:
            return {name: tuple(tuple(s) for s in shapes) for name, shapes in json.loads(prop.value).items()}
    return None


def first_difference(a: onnx.ModelProto, b: onnx.ModelProto) -> Optional[str]:
    """None when the two generic models are the same graph (nodes, attributes, initializers by content,
    inputs and outputs with names canonicalised); else where they first differ, naming the node."""
    ca, cb = _canonical_structure(a), _canonical_structure(b)
    data_a = {t.name: (tuple(t.dims), t.data_type, _tensor_data(s)) for t, s in zip(ca.graph.initializer,
                                                                                       a.graph.initializer)}
    data_b = {t.name: (tuple(t.dims), t.data_type, _tensor_data(s)) for t, s in zip(cb.graph.initializer,
                                                                                       b.graph.initializer)}
    na, nb = ca.graph.node, cb.graph.node
    # Canonical names number values in order, so a difference further down (a node more or fewer, another
    # constant) can rename the inputs of nodes above it: a wiring difference is said only when no op or
    # attribute differs anywhere, which names the node that differs with the shape.
    wired = None
    for i, (x, y) in enumerate(zip(na, nb)):
        where = f"{x.op_type} at node {i}"
        if (x.op_type, x.domain) != (y.op_type, y.domain):
            return f"the lowered graphs differ at node {i} ({x.op_type} vs {y.op_type})"
        attrs_x = {at.name: at.SerializeToString(deterministic=True) for at in x.attribute}
        attrs_y = {at.name: at.SerializeToString(deterministic=True) for at in y.attribute}
        if attrs_x != attrs_y:
            names = sorted(n for n in set(attrs_x) | set(attrs_y) if attrs_x.get(n) != attrs_y.get(n))
            what = "its value" if x.op_type == "Constant" else f"attribute(s) {', '.join(names)}"
            return f"shape-specific constants in the lowered graph: {where} ({what} differs with the shape)"
        for k, (p, q) in enumerate(zip(x.input, y.input)):
            if p in data_a and q in data_b:  # initializers: compared by content, whatever their names
                if data_a[p] != data_b[q]:
                    return (f"shape-specific constants in the lowered graph: {where} (its input {k}, an "
                            "initializer, differs with the shape)")
            elif p != q:
                wired = wired or f"the lowered graphs are wired differently at {where}"
        if len(x.input) != len(y.input) or list(x.output) != list(y.output):
            wired = wired or f"the lowered graphs are wired differently at {where}"
    if len(na) != len(nb):
        return f"the lowered graphs have {len(na)} and {len(nb)} nodes"
    if wired:
        return wired
    if data_a != data_b:
        return "the lowered graphs' initializers differ with the shape"
    if ca.SerializeToString(deterministic=True) != cb.SerializeToString(deterministic=True):
        return "the lowered graphs' inputs, outputs or types differ beyond the dynamic dimensions"
    return None
