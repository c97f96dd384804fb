"""Sizes of intermediate tensors, read from the graph inputs instead.

With symbolic shapes the captured graph reads a size where the model's Python code did (``B, C, H, W = y.shape``):
``sym_size.int(conv_out, 2)`` feeding the ``view`` after it. Size nodes are never part of a delegated partition
(a delegate takes sizes as inputs), so such a read is a path out of a block and back into it: the partitioner
must cut the block there, and every ``x.shape`` in a model's forward split its partition (PVT-v2 at
``dynamic=True``: 14 partitions where the static graph has one; the convolution before a reshape alone with
Inductor). The size's value is an expression in the input sizes' symbols, known from the trace, so the read is
rewritten as that arithmetic on the graph inputs' sizes: the tensor is no longer read, and the block stays whole.
Reads whose expression holds a symbol no input gives (data-dependent sizes) are left as they are.
"""
from __future__ import annotations

import operator

import sympy
import torch
import torch.fx as fx

aten = torch.ops.aten
_SIZE_READS = (aten.sym_size.int, aten.sym_numel.default, aten.sym_stride.int)


def sizes_from_inputs(gm: fx.GraphModule) -> int:
    """In place: rewrites reads of intermediate tensors' sizes as arithmetic on the inputs'. Returns how many."""
    graph = gm.graph
    reads = [n for n in graph.nodes if n.target in _SIZE_READS and isinstance(n.args[0], fx.Node)
             and n.args[0].op != "placeholder" and isinstance(n.meta.get("val"), torch.SymInt)]
    if not reads:
        return 0
    symbols, input_reads = _input_symbols(graph)
    built: dict = {}  # expression -> node computing it (shared between reads)
    rewritten = 0
    for node in reads:
        expr = node.meta["val"].node.expr
        if not expr.free_symbols or not expr.free_symbols <= symbols.keys():
            continue
        new: list[fx.Node] = []
        try:
            with graph.inserting_before(node):
                value = _build(graph, expr, symbols, built, new)
        except Exception:  # noqa: BLE001 - an expression form without a Python equivalent: keep the read
            for n in reversed(new):
                graph.erase_node(n)
            for e in [e for e, v in built.items() if v in new]:
                del built[e]
            continue
        if not isinstance(value, fx.Node):
            continue
        node.replace_all_uses_with(value)
        graph.erase_node(node)
        rewritten += 1
    for n in input_reads.made.values():  # made for an expression that was then kept as a read
        if not n.users:
            graph.erase_node(n)
    if rewritten:
        gm.recompile()
    return rewritten


def _input_symbols(graph: fx.Graph) -> tuple[dict, "_LazyInputSizes"]:
    """symbol -> node giving it: a size placeholder holding the symbol, else a size read of an input tensor (made
    after the placeholders when first used; the second value holds those made)."""
    symbols: dict = {}
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for p in placeholders:
        val = p.meta.get("val")
        if isinstance(val, torch.SymInt) and isinstance(val.node.expr, sympy.Symbol):
            symbols.setdefault(val.node.expr, p)
    lazy = _LazyInputSizes(graph, placeholders)
    for p in placeholders:
        val = p.meta.get("val")
        if isinstance(val, torch.Tensor):
            for d, s in enumerate(val.shape):
                if isinstance(s, torch.SymInt) and isinstance(s.node.expr, sympy.Symbol) \
                        and s.node.expr not in symbols:
                    symbols[s.node.expr] = lazy.reader(p, d, s)
    return symbols, lazy


class _LazyInputSizes:
    """A ``sym_size.int(input, d)`` node made on first use, placed after the last placeholder."""

    def __init__(self, graph: fx.Graph, placeholders: list):
        self.graph, self.last = graph, placeholders[-1] if placeholders else None
        self.made: dict = {}

    def reader(self, placeholder: fx.Node, dim: int, val):
        def make() -> fx.Node:
            key = (placeholder, dim)
            if key not in self.made:
                with self.graph.inserting_after(self.last):
                    node = self.graph.call_function(aten.sym_size.int, (placeholder, dim))
                node.meta["val"] = val
                self.last = self.made[key] = node
            return self.made[key]
        return make


# sympy expression classes (torch's own integer forms included) -> the Python operation on SymInts. Anything else
# raises, and the read stays.
def _binary(op):
    return lambda args: _fold(op, args)


def _fold(op, args):
    out = args[0]
    for a in args[1:]:
        out = (op, out, a)
    return out


def _handlers() -> dict:
    from torch.utils._sympy import functions as F
    return {
        sympy.Add: _binary(operator.add),
        sympy.Mul: _binary(operator.mul),
        F.FloorDiv: _binary(operator.floordiv),
        F.CleanDiv: _binary(operator.floordiv),
        F.PythonMod: _binary(operator.mod),
        F.Mod: _binary(operator.mod),
        F.Max: _binary(torch.sym_max),
        F.Min: _binary(torch.sym_min),
        F.PowByNatural: _binary(operator.pow),
    }


def _build(graph: fx.Graph, expr, symbols: dict, built: dict, new: list):
    """A node (or an int) computing ``expr``; nodes added go into ``new``, in order."""
    if expr in built:
        return built[expr]
    if isinstance(expr, sympy.Integer):
        return int(expr)
    if isinstance(expr, sympy.Symbol):
        source = symbols[expr]
        node = source() if callable(source) else source
        built[expr] = node
        return node
    handler = _handlers().get(type(expr))
    if isinstance(expr, sympy.Pow) and isinstance(expr.exp, sympy.Integer) and expr.exp > 0:
        handler = _binary(operator.pow)  # sympy's own form of x * x (a token count h * w with h == w)
    if handler is None:
        raise NotImplementedError(type(expr).__name__)
    args = [_build(graph, a, symbols, built, new) for a in expr.args]
    if isinstance(expr, sympy.Mul) and len(args) == 2 and args[0] == -1:  # -x reads better than -1 * x
        args = [args[1], -1]
    value = _emit(graph, handler(args), new)
    built[expr] = value
    return value


def _emit(graph: fx.Graph, tree, new: list):
    """(op, a, b) trees -> nodes with their traced values (``meta["val"]``, which marks them as size nodes)."""
    if not isinstance(tree, tuple):
        return tree
    op, a, b = tree
    a, b = _emit(graph, a, new), _emit(graph, b, new)
    vals = [x.meta["val"] if isinstance(x, fx.Node) else x for x in (a, b)]
    if not any(isinstance(v, torch.SymInt) for v in vals):
        return op(*vals)
    node = graph.call_function(op, (a, b))
    node.meta["val"] = op(*vals)
    new.append(node)
    return node
