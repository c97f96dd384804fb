"""Form cycle-free blocks of delegate-supported nodes: delegates claim in priority order, blocks below
``min_block_size`` are handed back, and every node left to Inductor keeps the reason it was left."""
from __future__ import annotations

import dataclasses
import operator
from typing import Sequence

import torch
import torch.fx as fx

from .aliases import dense, reaches, reads_storage, restridable
from .capability import NodeKind, classify, node_device, unsupported_reason


@dataclasses.dataclass
class Partition:
    delegate: str
    nodes: list[fx.Node]  # topological order; includes the getitem nodes that unpack multi-output ops
    inputs: list[fx.Node] = dataclasses.field(default_factory=list)
    outputs: list[fx.Node] = dataclasses.field(default_factory=list)

    @property
    def op_count(self) -> int:
        return sum(1 for n in self.nodes if classify(n) is NodeKind.OP)


@dataclasses.dataclass
class PartitionPlan:
    partitions: list[Partition]
    inductor_reasons: dict[fx.Node, str]  # every OP node left to Inductor -> why


def partition_graph(graph: fx.Graph, delegates: Sequence, min_block_size: int,
                    forced_to_inductor: frozenset = frozenset(), weights: frozenset = frozenset(),
                    keep_pointwise_islands: bool = False) -> PartitionPlan:
    """``weights``: placeholders that hold parameters or buffers (baked into delegates as constants).
    ``keep_pointwise_islands``: keep partitions of pointwise and view ops only (unit tests of the merge logic)."""
    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    kinds = {n: classify(n) for n in nodes}
    owner: dict[fx.Node, int] = {}  # node -> partition id (committed partitions of earlier delegates too)
    members: dict[int, list[fx.Node]] = {}
    delegate_of: dict[int, str] = {}
    reasons: dict[fx.Node, list[str]] = {n: [] for n in nodes if kinds[n] is NodeKind.OP}
    constant = _constant_ops(nodes, kinds, weights)
    next_id = 0

    # One pass per delegate and device: an engine runs on one device, so a partition never mixes devices (a
    # graph may compute partly on the CPU, e.g. sizes, and partly on CUDA).
    devices = list(dict.fromkeys(d for d in map(node_device, reasons) if d is not None)) or [None]
    for delegate, device in ((d, dev) for d in delegates for dev in devices):
        supported = set()
        for n, why in reasons.items():
            if n in owner or node_device(n) not in (device, None):
                continue
            reason = unsupported_reason(n, delegate, forced_to_inductor)
            if reason is None:
                supported.add(n)
            elif reason not in why:
                why.append(reason)
        fixed_max = max((index[n] for n in owner), default=-1)
        mine: list[int] = []
        for n in nodes:
            if kinds[n] is NodeKind.TUPLE_ITEM and owner.get(n.args[0]) in mine:
                owner[n] = owner[n.args[0]]  # unpacking a delegated multi-output op stays with it
                members[owner[n]].append(n)
                continue
            if n not in supported:
                continue
            candidates = sorted({owner[p] for p in n.all_input_nodes if owner.get(p) in mine},
                                key=lambda pid: -len(members[pid]))
            limit = max(index[n], fixed_max)
            target = None
            if candidates and not _creates_cycle([n] + [m for pid in candidates for m in members[pid]],
                                                 owner, members, index, limit):
                target = candidates[0]
                for pid in candidates[1:]:
                    _merge(target, pid, owner, members, mine)
            else:
                for pid in candidates:
                    if not _creates_cycle([n] + members[pid], owner, members, index, limit):
                        target = pid
                        break
            if target is None:
                target = next_id
                next_id += 1
                members[target] = []
                delegate_of[target] = delegate.name
                mine.append(target)
            members[target].append(n)
            owner[n] = target
        _merge_independent(mine, owner, members, nodes)
        _release_constant_outputs(mine, owner, members, index, constant, reasons, delegate.name)
        _release_returned_views(mine, owner, members, index, reasons, delegate.name)
        _release_storage_read_views(mine, owner, members, reasons, delegate.name)
        for pid in list(mine):
            ops = sum(1 for m in members[pid] if kinds[m] is NodeKind.OP)
            if ops < min_block_size or ops == 0:
                for m in members.pop(pid):
                    del owner[m]
                    if m in reasons:
                        reasons[m].append(f"{delegate.name}: block of {ops} op(s) < min_block_size={min_block_size}")
                mine.remove(pid)

    if not keep_pointwise_islands:
        _release_pointwise_islands(members, owner, delegate_of, kinds, constant, reasons)
    partitions = []
    for pid in sorted(members, key=lambda p: min(index[m] for m in members[p])):
        body = set(members[pid])
        # Multi-output ops: their getitem unpackers belong to the same partition.
        for m in list(body):
            for user in m.users:
                if kinds[user] is NodeKind.TUPLE_ITEM:
                    body.add(user)
        ordered = sorted(body, key=index.__getitem__)
        partitions.append(_with_boundary(Partition(delegate_of[pid], ordered), body, kinds))
    left = {n: "; ".join(dict.fromkeys(why)) or "no delegate" for n, why in reasons.items() if n not in owner}
    return PartitionPlan(partitions, left)


def _constant_ops(nodes: list[fx.Node], kinds, weights: frozenset) -> set[fx.Node]:
    """Single-output ops whose value depends on no graph input: factories, and arithmetic on weights."""
    constant: set[fx.Node] = set()
    for n in nodes:
        if n.op == "get_attr" or n in weights:
            constant.add(n)
        elif kinds[n] is NodeKind.OP and not isinstance(n.meta.get("val"), (tuple, list)) \
                and all(p in constant for p in n.all_input_nodes):
            constant.add(n)
    return constant


def _release_constant_outputs(mine: list[int], owner, members, index, constant: set, reasons, delegate: str) -> None:
    """Hand constants that a partition would only pass out (a full-size zeros buffer, BatchNorm scales of other
    layers) back to Inductor. A delegate folds such values into stored constants and copies them into its outputs
    on every call (ONNX Runtime: one host-to-device copy each), while Inductor computes or folds them in place;
    where a partition also uses one, it arrives as an input instead, which costs nothing. Reverse topological
    order releases a released node's constant producers in the same pass, so no cycle can form."""
    reason = f"{delegate}: constant consumed outside the partition; computed by Inductor"
    for pid in mine:
        body = members[pid]
        body.sort(key=index.__getitem__)  # merges append out of order
        kept = []
        for m in reversed(body):
            if m in constant and any(owner.get(u) != pid for u in m.users):
                del owner[m]
                reasons[m].append(reason)
            else:
                kept.append(m)
        body[:] = kept[::-1]


def _release_returned_views(mine: list[int], owner, members, index, reasons, delegate: str) -> None:
    """Hand back to Inductor a view the graph returns together with the tensor it views (``return y,
    y.flatten(1)``, ``return y, *y.split(4, 1)``), where it would be a partition output of its own. In eager the
    two share memory (an in-place change to one shows in the other); a delegate returns every output in a buffer
    of its own, and Inductor makes the view a view of the delegate's output again. A view-list op (split, unbind)
    leaves with its getitems, as one unit: an op stays with the partition that unpacks it. Only units none of
    whose users are in the partition leave it, so no cycle can form; reverse topological order releases the
    views a released view is made from."""
    reason = f"{delegate}: a view returned with the tensor it views; Inductor keeps it a view of that output"
    for pid in mine:
        body = members[pid]
        body.sort(key=index.__getitem__)
        released: set = set()
        for m in reversed(body):  # a getitem comes after its op, so its users are decided before the op
            if m in released or not _is_view(m):
                continue
            unit = _with_items(m)
            # Returned, or viewed only by views released here (y.flatten(1).t(): the flatten goes with the t).
            wanted = any(_returned(v) or (v.users and all(u in released for u in v.users)) for v in unit)
            outside = all(owner.get(u) != pid or u in unit for v in unit for u in v.users)
            if wanted and outside and _returns_its_base(m, owner, pid):
                for v in unit:
                    del owner[v]
                    if v in reasons:
                        reasons[v].append(reason)
                released.update(unit)
        body[:] = [m for m in body if m not in released]


def _release_storage_read_views(mine: list[int], owner, members, reasons, delegate: str) -> None:
    """Hand back to Inductor a partition output whose storage a reader outside reads (``as_strided``) where a
    fresh buffer cannot have its traced layout (``aliases.restridable``): an expand's stride 0 (``copy_strided``
    cannot write it, so the call failed at run time), a slice's gaps or offset (they hold its base's elements).
    Without it the delegate returns the base, and Inductor makes the view of that, sharing its storage as eager
    does. A released node's users in the partition leave too (else a cycle), and the views it is made from are
    looked at again (the partition may now output them only to be read the same way). A view the graph returns
    with such strides (static ones), which nothing in the partition uses, leaves the same way, so it comes back a
    view as in eager. An item of a view list (split, unbind) leaves with the op and its other items, as one unit:
    an op stays with the partition that unpacks it. A worklist, so a chain of views costs one visit per release."""
    read = f"{delegate}: its storage is read (as_strided) with strides a delegate output cannot have; " \
           "Inductor makes it a view of the delegate's output"
    returned = f"{delegate}: returned with strides a delegate output cannot have (an expand's 0, a slice's " \
               "gaps); Inductor makes it a view of the delegate's output, as in eager"
    follows = f"{delegate}: uses a view left to Inductor because its storage is read"
    for pid in mine:
        body = members[pid]
        inside = set(body)
        released: dict = {}

        def release(unit, why, work):
            for v in unit:
                if v in inside and v not in released:
                    released[v] = why
                    work += [u for u in v.users if u in inside and u not in released]  # they follow
                    work += [i for i in v.all_input_nodes if i in inside and i not in released]  # look again

        work = list(body)
        while work:
            m = work.pop()
            if m in released:
                continue
            if any(i in released for i in m.all_input_nodes):
                release([m], follows, work)
                continue
            outside = [u for u in m.users if u not in inside or u in released]
            if not outside:
                continue
            if reads_storage(outside, m) and _unrestridable(m):
                release(_view_unit(m), read, work)
            elif len(outside) == len(m.users) and reaches(outside, returned=True) and _overlapping_or_gapped(m):
                unit = _view_unit(m)
                if not any(u in inside and u not in released and u not in unit for v in unit for u in v.users):
                    release(unit, returned, work)  # (else its copy costs less than what would follow it)
        for m, why in released.items():
            del owner[m]
            if m in reasons:
                reasons[m].append(why)
        body[:] = [m for m in body if m not in released]


def _view_unit(node: fx.Node) -> list[fx.Node]:
    """What leaves a partition with ``node``: an item of a view list takes the list op and its other items."""
    if node.target is operator.getitem and isinstance(node.args[0], fx.Node) and _is_view(node.args[0]):
        return _with_items(node.args[0])
    return [node]


def _overlapping_or_gapped(node: fx.Node) -> bool:
    """A view (or an item of a view list) whose static strides no dense buffer has (an expand's stride 0, a
    slice's gaps). Returned, the delegate could give it only as a compact copy, where eager (and plain Inductor)
    give a view of its base; an offset alone does not show in a returned tensor, and symbolic strides are left
    as they are (undecidable)."""
    val = node.meta.get("val")
    return _viewed(node) is not None and isinstance(val, torch.Tensor) \
        and all(isinstance(v, int) for v in (*val.shape, *val.stride())) and not dense(val)


def _unrestridable(node: fx.Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and not restridable(val)


def _is_view(node: fx.Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and node.target.is_view and bool(node.args) \
        and isinstance(node.args[0], fx.Node)


def _with_items(node: fx.Node) -> list[fx.Node]:
    """``node`` and, for an op returning a list (split, unbind), the getitems that unpack it."""
    if not isinstance(node.meta.get("val"), (tuple, list)):
        return [node]
    return [node] + [u for u in node.users if u.target is operator.getitem]


def _viewed(node: fx.Node):
    """The tensor ``node`` views: a view op's input, or for an item of a view list (split, unbind) the list's
    input; None where ``node`` is no view."""
    if node.target is operator.getitem and isinstance(node.args[0], fx.Node) and _is_view(node.args[0]):
        return node.args[0].args[0]
    return node.args[0] if _is_view(node) else None


def _returned(node: fx.Node) -> bool:
    return any(u.op == "output" for u in node.users)


def _returns_its_base(view: fx.Node, owner, pid: int) -> bool:
    """Whether the graph also returns a tensor that ``view`` views (through views of partition ``pid``)."""
    base = view.args[0]
    while not _returned(base):
        if owner.get(base) != pid or _viewed(base) is None:
            return False
        base = _viewed(base)
    return True


# Ops that carry no pointwise tag but that Inductor computes as one loop over the output, fused with the ops
# around it: batch norm with fixed statistics is a per-channel scale and shift (decomposed to pointwise ops),
# small-window pooling is lowered to a loop over the window, and global average pooling (a mean over the spatial
# dimensions) is a reduction whose producers Inductor fuses into its loads. Where a delegate cannot take the
# convolutions of a model (float64 on the CPU), the batch norms, activations and pools between them formed
# islands of 3-4 ops, each a seam (ResNet-18: 9 partitions; MobileNetV3's squeeze-excitation pools: 3).
_FUSED_BY_INDUCTOR = frozenset({
    torch.ops.aten._native_batch_norm_legit_no_training.default,
    torch.ops.aten.max_pool2d_with_indices.default,
    torch.ops.aten.avg_pool2d.default,
    torch.ops.aten.mean.dim,
})


def _is_light(node: fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and (
        torch.Tag.pointwise in target.tags or target.is_view or target in _FUSED_BY_INDUCTOR)


def _release_pointwise_islands(members, owner, delegate_of, kinds, constant: set, reasons) -> None:
    """A partition of pointwise and view ops only (or ops fused like them, ``_FUSED_BY_INDUCTOR``), where other ops
    remain, goes back to Inductor: Inductor fuses such ops into the kernels next to them for free, while a
    delegate call adds a seam on each side (measured on the LiDAR example: BatchNorm + ReLU islands between sparse
    convs). A graph that is all such ops stays whole in the delegate, as there is then no seam."""
    total_ops = sum(1 for k in kinds.values() if k is NodeKind.OP)
    for pid in list(members):
        ops = [m for m in members[pid] if kinds[m] is NodeKind.OP]
        if len(ops) == total_ops or not all(m in constant or _is_light(m) for m in ops):
            continue
        why = (f"{delegate_of[pid]}: only pointwise, view, batch-norm or pooling ops, which Inductor fuses into the "
               "kernels around them; delegating them would only add seams")
        for m in members.pop(pid):
            del owner[m]
            if m in reasons:
                reasons[m].append(why)


def _with_boundary(p: Partition, body: set, kinds) -> Partition:
    inputs: dict[fx.Node, None] = {}
    outputs: dict[fx.Node, None] = {}
    for n in p.nodes:
        for inp in n.all_input_nodes:
            if inp not in body:
                inputs[inp] = None
        if kinds[n] is NodeKind.OP and isinstance(n.meta.get("val"), (tuple, list)):
            continue  # its getitems are the outputs
        if any(u not in body for u in n.users):
            outputs[n] = None
    p.inputs, p.outputs = list(inputs), list(outputs)
    return p


def _merge(into: int, other: int, owner, members, mine) -> None:
    for m in members.pop(other):
        owner[m] = into
        members[into].append(m)
    mine.remove(other)


def _creates_cycle(group: list[fx.Node], owner, members, index, limit: int) -> bool:
    """Would treating ``group`` as one unit close a cycle (a path leaving it and coming back)?

    Committed partitions are units too, so a path that enters one continues from all its members. Nodes past
    ``limit`` cannot lead back: everything that belongs to a unit lies at or before it.
    """
    inside = set(group)
    group_ids = {owner.get(n) for n in group} - {None}
    stack = [u for n in group for u in n.users if u not in inside]
    seen: set = set()
    seen_units: set = set()
    while stack:
        v = stack.pop()
        if v in inside:
            return True
        if v in seen:
            continue
        seen.add(v)
        pid = owner.get(v)
        if pid is not None and pid not in group_ids:
            if pid not in seen_units:
                seen_units.add(pid)
                for m in members[pid]:
                    stack.extend(u for u in m.users if u not in seen)
            continue
        if index[v] > limit:
            continue
        stack.extend(v.users)
    return False


def _merge_independent(mine: list[int], owner, members, nodes) -> None:
    """Fuse blocks of one delegate that have no path between them: fewer delegate calls, fewer seams.

    Blocks a and b may merge unless a path leads from one to the other through some other unit (a node left
    out, or another partition): merged, that path would be a cycle. Reachability is computed once per merge on
    the graph condensed to units, as bitsets over this delegate's blocks, so each pair check is a bit test
    (a depth-first search per pair made this quadratic in the graph size times the number of pairs).
    """
    if len(mine) < 2:
        return
    start = 0
    while True:
        bit = {pid: 1 << k for k, pid in enumerate(mine)}
        via = _reach_via_other_units(owner, nodes, bit)
        pair = None
        for i in range(start, len(mine)):
            a = mine[i]
            for b in mine[i + 1:]:
                if not (via[a] & bit[b]) and not (via[b] & bit[a]):
                    pair = (i, a, b)
                    break
            if pair:
                break
        if pair is None:
            return
        start, a, b = pair  # blocks before a found no partner, and merging only adds paths: skip them next time
        _merge(a, b, owner, members, mine)


def _reach_via_other_units(owner, nodes, bit) -> dict:
    """For each of the delegate's blocks: the blocks reachable from it through at least one other unit."""
    unit = {n: owner.get(n, n) for n in nodes}  # partition id, or the node itself
    succ: dict = {}
    for n in nodes:
        u = unit[n]
        for user in n.users:
            v = unit[user]
            if v != u:
                succ.setdefault(u, set()).add(v)
    # Kahn's order over the condensed DAG, then reachability (>= 1 edge) in reverse order.
    indegree = {u: 0 for u in unit.values()}
    for vs in succ.values():
        for v in vs:
            indegree[v] += 1
    order = [u for u, d in indegree.items() if d == 0]
    for u in order:  # grows while iterating
        for v in succ.get(u, ()):
            indegree[v] -= 1
            if indegree[v] == 0:
                order.append(v)
    reach: dict = {}
    for u in reversed(order):
        r = 0
        for v in succ.get(u, ()):
            r |= bit.get(v, 0) | reach[v]
        reach[u] = r
    via = {}
    for pid in bit:
        r = 0
        for v in succ.get(pid, ()):
            r |= reach[v]
        via[pid] = r
    return via
