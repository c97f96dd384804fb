"""The builder a lowering writes ONNX through: fresh names, constants, nodes, and concrete shapes of fx values."""
from __future__ import annotations

import itertools
from typing import Any, Sequence, Union

import numpy as np
import onnx
import torch
import torch.fx as fx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17

TORCH_TO_ONNX = {
    torch.float32: TensorProto.FLOAT,
    torch.float16: TensorProto.FLOAT16,
    torch.bfloat16: TensorProto.BFLOAT16,
    torch.float64: TensorProto.DOUBLE,
    torch.int64: TensorProto.INT64,
    torch.int32: TensorProto.INT32,
    torch.int16: TensorProto.INT16,
    torch.int8: TensorProto.INT8,
    torch.uint8: TensorProto.UINT8,
    torch.bool: TensorProto.BOOL,
}

Names = Union[str, tuple]

# What will run the lowered model, for the few lowerings whose fastest exact ONNX form depends on the kernels
# (the delegate says which: Delegate.lowering_target). GENERIC relies on ONNX semantics only and is right anywhere.
GENERIC = "generic"
# ONNX Runtime's CPU provider: MLAS kernels (whose min/max propagate NaN through their second operand, see
# ops/pooling.py) and its NCHWc layout pass, which keeps only some operators in the blocked layout.
ORT_CPU = "onnxruntime-cpu"


# ONNX Runtime's CPU kernels broadcast a single-element operand of lower rank element by element when the other
# operand's last dim is 1: Sub of a [256, 7, 7, 1] tensor and a 0-d constant took 256 us, with a [1, 1, 1, 1]
# constant 12 us (RAFT's coordinate arithmetic: 90 of its 210 ms per call). So such a constant operand of a
# broadcasting op is given the other operand's rank (which never changes the op's output shape) - only then:
# ONNX Runtime's fusions (Gelu, LayerNormalization...) match scalar constants of rank 0 or 1 only.
_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Equal", "Less", "LessOrEqual",
                           "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Where", "PRelu", "BitShift"})
# Ops whose output has the shape of their first input: how the known shapes reach the values lowerings build.
_SAME_SHAPE = frozenset({"Abs", "Acos", "Asin", "Atan", "Cast", "Ceil", "Clip", "Cos", "Cosh", "Elu", "Erf", "Exp",
                        "Floor", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Log",
                        "Neg", "Not", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Sinh",
                        "Softplus", "Softsign", "Sqrt", "Tan", "Tanh"})


class LoweringContext:
    """Collects the nodes and initializers of one ONNX graph while lowerings run over an fx partition.

    ``values`` maps every fx node of the partition to its concrete value: a meta tensor (shape and dtype, sizes
    already specialised to one input-shape signature) or a Python scalar for size arithmetic. ``target``: GENERIC
    or ORT_CPU, what will run the model.
    """

    def __init__(self, values: dict[fx.Node, Any], target: str = GENERIC):
        self.values = values
        self.target = target
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.onnx_names: dict[fx.Node, Names] = {}
        self._ids = itertools.count()
        self._const_cache: dict[tuple, str] = {}
        self._shape: dict[str, tuple] = {}  # ONNX value name -> shape, where known (see _BROADCASTING)
        self._single: dict[str, tuple] = {}  # single-element constants: name -> (value array, dtype)

    # -- reading the fx side ------------------------------------------------------------------------------------
    def val(self, x) -> Any:
        """Concrete value of an fx argument: meta tensor for tensor nodes, int/float for size nodes."""
        if isinstance(x, fx.Node):
            return self.values[x]
        return x

    def arg(self, x) -> Any:
        """An fx argument with every size node replaced by its concrete int (lists handled element-wise)."""
        if isinstance(x, (list, tuple)):
            return type(x)(self.arg(e) for e in x)
        if isinstance(x, fx.Node):
            v = self.values[x]
            if isinstance(v, torch.Tensor):
                raise TypeError(f"{x} is a tensor, not a scalar argument")
            return v
        if isinstance(x, torch.SymInt):
            return int(x)
        return x

    def shape(self, x) -> list[int]:
        return [int(s) for s in self.val(x).shape]

    def dtype(self, x) -> torch.dtype:
        v = self.val(x)
        return v.dtype if isinstance(v, torch.Tensor) else _scalar_dtype(v)

    def has(self, x) -> bool:
        """Whether ``x`` is a tensor of this partition with an ONNX value: an input or an op lowered before."""
        return isinstance(x, fx.Node) and x in self.onnx_names and isinstance(self.values.get(x), torch.Tensor)

    def input(self, x, dtype: torch.dtype | None = None) -> str:
        """ONNX value name for a tensor argument (or a scalar, as a constant), cast to ``dtype`` if given."""
        if isinstance(x, fx.Node) and isinstance(self.values.get(x), torch.Tensor):
            name = self.onnx_names[x]
            self._shape[name] = tuple(self.values[x].shape)
            if dtype is not None and self.values[x].dtype != dtype:
                return self.cast(name, dtype)
            return name
        value = self.arg(x)
        return self.const(value, dtype if dtype is not None else _scalar_dtype(value))

    # -- writing the ONNX side ----------------------------------------------------------------------------------
    def fresh(self, hint: str = "v") -> str:
        return f"{hint}:{next(self._ids)}"  # ":" keeps these apart from weight names

    def op(self, op_type: str, *inputs: str, outputs: int = 1, domain: str = "", **attrs) -> Names:
        out = tuple(self.fresh(op_type.lower()) for _ in range(outputs))
        attrs = {k: v for k, v in attrs.items() if v is not None}
        shapes = [self._shape.get(i) for i in inputs]
        if not domain and op_type in _BROADCASTING:
            inputs, shapes = self._full_rank_singles(list(inputs), shapes)
            if None not in shapes:
                self._shape[out[0]] = _broadcast(shapes)
        elif not domain and op_type in _SAME_SHAPE and inputs and shapes[0] is not None:
            self._shape[out[0]] = shapes[0]
        self.nodes.append(helper.make_node(op_type, list(inputs), list(out), domain=domain or None, **attrs))
        return out[0] if outputs == 1 else out

    def _full_rank_singles(self, inputs: list, shapes: list) -> tuple[list, list]:
        others = [sh for i, sh in zip(inputs, shapes) if sh is not None and i not in self._single]
        rank = max((len(sh) for sh in others if len(sh) >= 2 and _static_one(sh[-1])), default=0)
        for k, name in enumerate(inputs):
            if name in self._single and len(shapes[k]) < rank:
                array, dtype = self._single[name]
                inputs[k] = self.const(array.reshape([1] * rank), dtype)
                shapes[k] = (1,) * rank
        return inputs, shapes

    def const(self, value, dtype: torch.dtype) -> str:
        """An initializer holding ``value`` (scalar, nested list, numpy array or tensor) as ``dtype``."""
        if isinstance(value, torch.Tensor):
            return self.tensor_const(value.to(dtype))
        key = (repr(value), np.shape(value), dtype)
        name = self._const_cache.get(key)
        if name is None:
            name = self.fresh("const")
            array = np.asarray(value, dtype=_numpy_dtype(dtype))
            tensor = numpy_helper.from_array(array, name)
            if dtype == torch.bfloat16:
                tensor = _bf16_tensor(torch.tensor(array, dtype=torch.float32), name)
            self.initializers.append(tensor)
            self._const_cache[key] = name
            self._shape[name] = array.shape
            if array.size == 1:
                self._single[name] = (array, dtype)
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.const([int(v) for v in values], torch.int64)

    def live_nodes(self, graph_outputs: Sequence[str]) -> list:
        """The nodes the graph's outputs depend on. A lowering may read an earlier node's input instead of its value
        (an unbind of a permute splits the permute's input), leaving that node unread; ONNX Runtime would still run
        it (no lowering writes subgraphs, so a node's inputs are all it reads)."""
        needed, live = set(graph_outputs), []
        for n in reversed(self.nodes):
            if any(o in needed for o in n.output):
                live.append(n)
                needed.update(i for i in n.input if i)
        return live[::-1]

    def used_initializers(self, graph_outputs: Sequence[str],
                          nodes: Sequence | None = None) -> list[onnx.TensorProto]:
        """The initializers some node of ``nodes`` (the live ones) or a graph output reads: not a scalar that
        _full_rank_singles replaced everywhere, nor the weights of a node no output depends on. (Lowerings emit no
        subgraphs, whose reads ``n.input`` would not show.)"""
        used = {i for n in (self.nodes if nodes is None else nodes) for i in n.input} | set(graph_outputs)
        return [t for t in self.initializers if t.name in used]

    def tensor_const(self, tensor: torch.Tensor, name: str | None = None) -> str:
        name = name or self.fresh("init")
        self.initializers.append(tensor_proto(tensor.detach(), name))
        self._shape[name] = tuple(tensor.shape)
        return name

    def cast(self, name: str, dtype: torch.dtype) -> str:
        return self.op("Cast", name, to=TORCH_TO_ONNX[dtype])


def _static_one(d) -> bool:
    return isinstance(d, int) and d == 1  # a symbolic size is left alone (comparing it would add a guard)


def _broadcast(shapes: list) -> tuple | None:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except (TypeError, ValueError):  # symbolic sizes: not tracked further
        return None


_PROTO_LIMIT = 2**31  # protobuf's limit on one serialized message


def tensor_proto(tensor: torch.Tensor, name: str) -> onnx.TensorProto:
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes >= _PROTO_LIMIT:  # a model's weights may add up to more (delegates/external_data.py), one may not
        raise ValueError(f"constant {name!r} holds {nbytes / 2**30:.1f} GiB: the ONNX graph this partition is lowered "
                         "to cannot hold one tensor of 2 GiB or more")
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        return _bf16_tensor(tensor, name)
    return numpy_helper.from_array(tensor.numpy(), name)


def _bf16_tensor(tensor: torch.Tensor, name: str) -> onnx.TensorProto:
    raw = tensor.to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
    return helper.make_tensor(name, TensorProto.BFLOAT16, list(tensor.shape), raw, raw=True)


def _numpy_dtype(dtype: torch.dtype):
    if dtype == torch.bfloat16:
        return np.float32
    return torch.empty((), dtype=dtype).numpy().dtype


def _scalar_dtype(value) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    if isinstance(value, float):
        return torch.float32
    if isinstance(value, (list, tuple)) and value:
        return _scalar_dtype(value[0])
    raise TypeError(f"cannot infer a dtype for {value!r}")
