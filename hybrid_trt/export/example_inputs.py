"""The example inputs of an export: their names, the listed shapes built from them, and what torch.export traces.

A package takes positional tensors; nested inputs are flattened and named by their place (``batch.image``), and
each listed shape (``shapes=``) becomes one case: the example itself where the shape matches, else random values
of the example's dtype. Where the listed shapes differ in a dimension, that dimension becomes dynamic over the
listed range.
"""
from __future__ import annotations

import re

import torch
import torch.utils._pytree as pytree

from ..log import logger
from .errors import ExportError


class FlatInputs(torch.nn.Module):
    """The model called with its nested inputs rebuilt from the flat tensors the package takes."""

    def __init__(self, model: torch.nn.Module, in_spec):
        super().__init__()
        self.model, self.in_spec = model, in_spec

    def forward(self, *leaves):
        return self.model(*pytree.tree_unflatten(list(leaves), self.in_spec))


def to_eval(model: torch.nn.Module) -> torch.nn.Module:
    """``model.eval()``, except for a module torch.export captured (``ExportedProgram.module()``, and so every
    pt2e-quantized model), which refuses ``train()``/``eval()`` with NotImplementedError: its mode was fixed when
    it was captured, so it is left as it is (export used to fail on it with torch's bare error)."""
    try:
        model.eval()
    except NotImplementedError:
        logger.debug("hybrid_trt: %s refuses eval() (a module captured by torch.export): its mode is the one it was "
                     "captured in", type(model).__name__)
    return model


def example_tensors(model: torch.nn.Module, example_inputs) -> tuple:
    """(positional arguments, their tensors, an input name per tensor, the structure to rebuild the arguments
    from the tensors or None when each argument is a tensor). Nested tensors are named by their place
    (``batch.image``). ValueError when something other than a tensor is in the example."""
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    leaves, spec = pytree.tree_flatten(args)
    if not leaves or not all(isinstance(a, torch.Tensor) for a in leaves):
        raise ValueError("example_inputs must be the positional arguments of forward: tensors, or tuples, lists "
                         f"and dicts of tensors; got {[type(a).__name__ for a in (leaves or args)]}")
    _check_binds(model, args)
    names = _input_names(model, len(args))
    if all(isinstance(a, torch.Tensor) for a in args):
        return args, tuple(leaves), names, None
    return args, tuple(leaves), _leaf_names(names, args), spec


def _leaf_names(arg_names: list[str], args: tuple) -> list[str]:
    """A name per tensor of nested positional inputs: the argument's name and the keys and indices leading to it
    (``batch.image``, ``frames.0``)."""
    names = []
    for name, arg in zip(arg_names, args):
        for path, _leaf in pytree.tree_flatten_with_path(arg)[0]:
            keys = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path]
            names.append(".".join([name, *keys]))
    return names


def dim_name(name: str, dim: int) -> str:
    """The torch.export Dim of one input dimension of its own, an identifier ("batch.image", 0 ->
    "batch_image_0"); the command's tie hint maps torch.export's messages back through it."""
    return re.sub(r"\W", "_", f"{name}_{dim}")


def _check_binds(model: torch.nn.Module, args: tuple) -> None:
    """ValueError when forward cannot take ``args`` as its positional arguments (a keyword-only argument, a count
    that differs): said before the model runs, instead of Python's TypeError from inside the eager call."""
    import inspect
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):  # no signature to read (a C++ or wrapped forward): the call itself will say
        return
    try:
        signature.bind(*args)
    except TypeError as e:
        raise ValueError(f"example_inputs do not fit forward{signature}: {e}. A package takes positional tensor "
                         "inputs only: give every input in example_inputs, in order, or wrap the model in a module "
                         "whose forward takes them positionally and passes the rest") from None


def _input_names(model: torch.nn.Module, n: int) -> list[str]:
    import inspect
    try:
        params = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:n]]
    return names + [f"input_{i}" for i in range(len(names), n)]


def shape_cases(args: tuple, names: list[str], shapes) -> list[tuple]:
    """The example inputs of every listed shape: the example itself where the shape matches, else random
    values of the example's dtype (integers within the example's range)."""
    if not shapes:
        return [args]
    cases = []
    for entry in shapes:
        if isinstance(entry, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in entry):
            if len(entry) != len(args):
                raise ExportError(f"shapes entry has {len(entry)} tensors; the model takes {len(args)}")
            for name, t, example in zip(names, entry, args):
                if (t.dtype, t.device) != (example.dtype, example.device):
                    raise ExportError(f"shapes entry {len(cases)}: input {name!r} is {t.dtype} on {t.device}, the "
                                      f"example {example.dtype} on {example.device}; a package takes the example's "
                                      "dtypes and device (export once per dtype)")
            cases.append(tuple(entry))
            continue
        if not isinstance(entry, dict):
            raise ExportError(f"shapes entries are dicts {{input name: shape}} or tuples of tensors; got {entry!r}")
        unknown = sorted(set(entry) - set(names))
        if unknown:
            raise ExportError(f"shapes names unknown input(s) {unknown}; the model's inputs are {names}")
        gen = torch.Generator().manual_seed(len(cases))
        case = []
        for name, example in zip(names, args):
            shape = _sizes(entry.get(name, example.shape), name)
            if len(shape) != example.dim():
                raise ExportError(f"shape {list(shape)} for input {name!r} has {len(shape)} dimensions; the example "
                                  f"has {example.dim()} ({list(example.shape)})")
            if any(s < 0 for s in shape):
                raise ExportError(f"shape {list(shape)} for input {name!r} has a negative size; list the sizes to "
                                  "build engines for (a range is given by listing its ends, or by dynamic_shapes)")
            case.append(example if shape == tuple(example.shape) else _random_like(example, shape, gen))
        cases.append(tuple(case))
    return cases


def _sizes(shape, name: str) -> tuple:
    """A listed shape: a sequence of ints, or the command line's spelling "2x3x224x224"."""
    try:
        return tuple(int(d) for d in (shape.lower().split("x") if isinstance(shape, str) else shape))
    except (TypeError, ValueError):
        raise ExportError(f"shapes: {shape!r} for input {name!r} is not a shape; give its sizes as a tuple of ints "
                          "(or a string such as '2x3x224x224')") from None


def _random_like(example: torch.Tensor, shape, gen) -> torch.Tensor:
    if example.dtype.is_floating_point or example.dtype.is_complex:
        return torch.randn(shape, generator=gen, dtype=example.dtype).to(example.device)
    if example.dtype == torch.bool:
        return (torch.rand(shape, generator=gen) > 0.5).to(example.device)
    lo = int(example.min()) if example.numel() else 0
    hi = int(example.max()) + 1 if example.numel() else 2
    return torch.randint(lo, max(hi, lo + 1), shape, generator=gen, dtype=example.dtype).to(example.device)


def trace_example(args: tuple, dynamic_shapes, names: list[str]) -> tuple:
    """The inputs torch.export traces with: ``args``, with each dynamic dimension of size 1 repeated to size 2 where
    its range holds 2. torch.export specialises a dimension whose example size is 1 to that size, so a batch
    declared dynamic from a batch-1 example (the usual example) failed: "You marked x_0 as dynamic but your code
    specialized it to be a constant (1)". Left as given when a dimension is derived from another (``2 * b``)."""
    specs = _specs_per_input(dynamic_shapes, names, len(args))
    dims = [dim for spec in specs for dim in spec.values()]
    if not any(args[i].shape[d] == 1 for i, spec in enumerate(specs) for d in spec) or any(
            type(dim).__name__ == "_DerivedDim" for dim in dims):
        return args
    out = []
    for t, spec in zip(args, specs):
        for d, dim in spec.items():
            lo, hi = getattr(dim, "min", None), getattr(dim, "max", None)
            if t.shape[d] == 1 and (not isinstance(lo, int) or lo <= 2) and (not isinstance(hi, int) or hi >= 2):
                t = torch.cat([t, t], d)
        out.append(t)
    return tuple(out)


def _specs_per_input(dynamic_shapes, names: list[str], n: int) -> list[dict]:
    """``{dim: Dim}`` per input from torch.export's ``dynamic_shapes`` (a tuple per input or a dict by name; each
    input's a dict by dimension or a tuple with None for static ones); empty for anything else."""
    if isinstance(dynamic_shapes, dict):
        per_input = [dynamic_shapes.get(name) for name in names]
    elif isinstance(dynamic_shapes, (tuple, list)) and len(dynamic_shapes) == n:
        per_input = list(dynamic_shapes)
    else:
        return [{} for _ in range(n)]
    out = []
    for spec in per_input:
        if isinstance(spec, dict):
            out.append({d: dim for d, dim in spec.items() if isinstance(d, int) and dim is not None})
        elif isinstance(spec, (tuple, list)):
            out.append({d: dim for d, dim in enumerate(spec) if dim is not None})
        else:
            out.append({})
    return out


def check_listed_shapes(cases: list[tuple], dynamic_shapes, names: list[str]) -> None:
    """Each listed shape fits the dynamic_shapes given: a size outside a dimension's range, or a dimension the
    input's spec leaves static listed at two sizes, failed inside torch.export ("8 not in range [2, 4]") without
    naming the input or the shape. Inputs whose spec is not read here (another structure) are left to torch.export."""
    if not isinstance(dynamic_shapes, (dict, tuple, list)):
        return
    specs = _specs_per_input(dynamic_shapes, names, len(cases[0]))
    for i, (name, spec) in enumerate(zip(names, specs)):
        given = (dynamic_shapes.get(name) if isinstance(dynamic_shapes, dict)
                 else dynamic_shapes[i] if len(dynamic_shapes) == len(names) else None)
        for d in range(cases[0][i].dim()):
            sizes = sorted({int(c[i].shape[d]) for c in cases})
            dim = spec.get(d)
            if dim is None:
                if len(sizes) > 1 and isinstance(given, (dict, tuple, list)):
                    raise ExportError(f"the listed shapes give input {name!r} dimension {d} the sizes {sizes}, and "
                                      "dynamic_shapes leaves it static; make it dynamic (a Dim over their range) or "
                                      "list one size for it")
                continue
            lo, hi = getattr(dim, "min", None), getattr(dim, "max", None)
            outside = [n for n in sizes if (isinstance(lo, int) and n < lo) or (isinstance(hi, int) and n > hi)]
            if outside and type(dim).__name__ != "_DerivedDim":
                raise ExportError(f"a listed shape gives input {name!r} dimension {d} the size {outside[0]}, outside "
                                  f"the range {lo}..{hi} of its Dim {getattr(dim, '__name__', dim)!r} in "
                                  "dynamic_shapes; widen the Dim's range or list sizes within it")


def derived_dynamic_shapes(cases: list[tuple], names: list[str]) -> tuple:
    """Dimensions whose size differs among the listed shapes become dynamic, over the listed range. Dimensions
    equal to each other in every listed shape (a batch dimension shared by two inputs) are one dimension."""
    from torch.export import Dim
    dims: dict = {}  # the sizes across the listed shapes -> one Dim
    spec = []
    for i, name in enumerate(names):
        per_input = {}
        for d in range(cases[0][i].dim()):
            values = tuple(int(c[i].shape[d]) for c in cases)
            if len(set(values)) > 1:
                if values not in dims:
                    dims[values] = Dim(dim_name(name, d), min=min(values), max=max(values))
                per_input[d] = dims[values]
        spec.append(per_input or None)
    return tuple(spec)
