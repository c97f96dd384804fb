"""Rewrite the ATen graph: each delegated partition becomes one ``hybrid_trt::delegate`` call.

Partitions are cycle-free, so the graph condensed to (partition | node) units is a DAG; it is re-emitted in a
topological order that stays as close to the original as possible.
"""
from __future__ import annotations

import heapq
import operator
from typing import Sequence

import torch.fx as fx

from ..engines.op import delegate


def stitch(gm: fx.GraphModule, parts: Sequence) -> fx.GraphModule:
    """``parts``: objects with ``nodes``, ``extracted`` (ExtractedPartition) and ``key`` (the partition's content
    key, which the delegate call carries)."""
    nodes = list(gm.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    unit_of: dict[fx.Node, object] = {n: n for n in nodes}
    for part in parts:
        for n in part.nodes:
            unit_of[n] = part
    members: dict[object, list] = {}
    for n in nodes:
        members.setdefault(unit_of[n], []).append(n)
    deps: dict[object, set] = {u: set() for u in members}
    users: dict[object, set] = {u: set() for u in members}
    for u, ns in members.items():
        for n in ns:
            for inp in n.all_input_nodes:
                v = unit_of[inp]
                if v is not u:
                    deps[u].add(v)
                    users[v].add(u)
    order_key = {u: min(index[n] for n in ns) for u, ns in members.items()}
    ready = [(order_key[u], id(u), u) for u, d in deps.items() if not d]
    heapq.heapify(ready)
    remaining = {u: len(d) for u, d in deps.items()}

    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    emitted = 0
    while ready:
        _, _, u = heapq.heappop(ready)
        emitted += 1
        if isinstance(u, fx.Node):
            env[u] = graph.node_copy(u, env.__getitem__)
        else:
            ex = u.extracted
            call = graph.call_function(delegate, (u.key, [env[i] for i in ex.tensor_inputs],
                                                  [env[s] for s in ex.size_inputs]))
            for k, out in enumerate(ex.outputs):
                env[out] = graph.call_function(operator.getitem, (call, k))
        for v in users[u]:
            remaining[v] -= 1
            if remaining[v] == 0:
                heapq.heappush(ready, (order_key[v], id(v), v))
    if emitted != len(members):
        raise RuntimeError("hybrid_trt internal error: partitions form a cycle")
    return fx.GraphModule(gm, graph)
