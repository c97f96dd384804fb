"""A compiled graph that is nothing but delegate calls, called without the layers around them.

When every op of a graph went to delegates, the graph Inductor compiles is: inputs -> ``hybrid_trt::delegate``
calls -> their outputs. Around those calls the compiled callable still has Dynamo's disable wrappers, AOTAutograd's
runtime wrapper, Inductor's generated code (unpacking every argument, weights included, asserting sizes) and the
dispatcher's trip into the op's Python kernel: about 20 us per call on a warm cache for MobileNetV3-Large, more
when the model's own work has evicted them (``benchmarks/results/overhead_cpu_2core.md``). None of it does
anything for such a graph, so the backend returns :func:`direct_callable` instead, which calls the partition
runtimes with the right arguments.

Inductor still compiles the graph at the cold compile (its caches hold it as they do for every hybrid graph); the
plan is stored in the graph's manifest, so a warm start returns the same direct callable from the manifest and the
loaded engines without consulting Inductor at all (backend.py, ``_served_directly``).

The plan applies only where AOTAutograd's runtime wrapper is the identity (:func:`input_mapping_reason`,
:func:`aot_wrapper_reason`): no input mutations, no outputs aliasing inputs or intermediates, no effect tokens,
no functionalized RNG, no tensor subclasses, no dynamic outputs to mark, and the compiled graph's inputs are
Dynamo's arguments one for one. Never under Inductor's CUDA-graph trees (``cuda_graph_runner="trees"``), which
capture Inductor's own callable; the whole runner (whole_graph.py) captures the direct callable itself.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Callable, Mapping, Optional

import torch
import torch.fx as fx

from ..engines.op import delegate

_INPUT = -1  # a Ref (_INPUT, i) is graph input i; (s, j) is output j of step s


@dataclasses.dataclass(frozen=True)
class DirectPlan:
    """Straight-line delegate calls: each step is (content key, input refs); outputs are refs."""
    steps: tuple
    outputs: tuple

    def to_json(self) -> dict:
        return {"steps": [[key, [list(r) for r in refs]] for key, refs in self.steps],
                "outputs": [list(r) for r in self.outputs]}

    @classmethod
    def from_json(cls, data) -> Optional["DirectPlan"]:
        try:
            steps = tuple((str(key), tuple((int(s), int(i)) for s, i in refs)) for key, refs in data["steps"])
            return cls(steps, tuple((int(s), int(i)) for s, i in data["outputs"]))
        except (KeyError, TypeError, ValueError):
            return None


def plan_of(gm: fx.GraphModule, n_lifted: int = 0) -> Optional[DirectPlan]:
    """The plan of ``gm`` when it holds only placeholders, static delegate calls (no size arguments), ``getitem``
    of their results and an output of those results; None otherwise. The first ``n_lifted`` placeholders are
    weights AOTAutograd passes in front of Dynamo's arguments (see input_mapping_reason): a plan never reads
    them (baked weights are inside the engines), and its input refs are Dynamo's argument positions."""
    refs: dict = {}
    calls: dict = {}
    steps, outputs, n_inputs = [], None, 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if n_inputs >= n_lifted:
                refs[node] = (_INPUT, n_inputs - n_lifted)
            n_inputs += 1
        elif node.op == "call_function" and node.target is delegate and not node.kwargs and len(node.args) == 3:
            key, inputs, sizes = node.args
            if sizes or not isinstance(key, str) or not all(isinstance(i, fx.Node) and i in refs for i in inputs):
                return None
            calls[node] = len(steps)
            steps.append((key, tuple(refs[i] for i in inputs)))
        elif (node.op == "call_function" and node.target is operator.getitem and node.args[0] in calls
              and isinstance(node.args[1], int)):
            refs[node] = (calls[node.args[0]], node.args[1])
        elif node.op == "output":
            outs = node.args[0]
            if not isinstance(outs, (tuple, list)):
                return None
            # A graph input returned as an output is an alias AOTAutograd's wrapper handles; not ours.
            if not all(isinstance(o, fx.Node) and o in refs and refs[o][0] != _INPUT for o in outs):
                return None
            outputs = tuple(refs[o] for o in outs)
        else:
            return None
    if not steps or outputs is None:
        return None
    return DirectPlan(tuple(steps), outputs)


def input_mapping_reason(n_lifted: int, example_inputs, n_graph_inputs: int) -> Optional[str]:
    """Why the compiled graph's inputs are not ``n_lifted`` weights (the captured graph's own parameters and
    buffers, which AOTAutograd passes in front: Dynamo's ``install_free_tensors``) followed by Dynamo's arguments
    one for one (None when they are). ``example_inputs``: Dynamo's arguments; ``n_graph_inputs``: the compiled
    graph's placeholders."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass
    if n_graph_inputs != n_lifted + len(example_inputs):
        return (f"{n_graph_inputs} graph inputs for {n_lifted} lifted weights and {len(example_inputs)} arguments "
                "(deduplicated or synthetic bases)")
    if any(is_traceable_wrapper_subclass(t) for t in example_inputs if isinstance(t, torch.Tensor)):
        return "tensor subclass inputs"
    return None


def aot_wrapper_reason(n_outputs: int) -> Optional[str]:
    """Why AOTAutograd's runtime wrapper around the graph being compiled (``n_outputs`` outputs) does more than
    pass its arguments in and its outputs out (None when it does nothing else).

    Reads the metadata AOTAutograd leaves in the tracing context while it calls the graph compiler, so it must be
    called from there (the backend's ``inner_compile``). Anything unexpected is a reason: the plan is an
    optimisation, never a requirement."""
    from torch._guards import TracingContext
    meta = getattr(TracingContext.try_get(), "fw_metadata", None)
    if meta is None:
        return "no AOTAutograd metadata"
    try:
        from torch._functorch._aot_autograd.schemas import OutputType
        if meta.num_mutated_inp_runtime_indices or any(
                i.mutates_data or i.mutates_metadata or i.mutates_storage_metadata for i in meta.input_info):
            return "input mutations"
        if meta.num_intermediate_bases or any(o.output_type != OutputType.non_alias for o in meta.output_info):
            return "outputs that alias inputs or intermediates"
        if meta.tokens or meta.is_rng_op_functionalized or meta.num_graphsafe_rng_states:
            return "effect tokens or functionalized RNG"
        if meta.dynamic_outputs:
            return "outputs with dynamic sizes to mark"
        if len(meta.output_info) != n_outputs:
            return f"{len(meta.output_info)} user outputs for {n_outputs} graph outputs"
    except (AttributeError, ImportError) as e:  # another torch: its metadata is not the one checked here
        return f"unrecognised AOTAutograd metadata ({e})"
    return None


def direct_callable(plan: DirectPlan, runtimes: Mapping[str, object]) -> Optional[Callable]:
    """The compiled graph's callable for ``plan``: Dynamo's arguments in, the graph's outputs out. None when a
    step's runtime is not among ``runtimes`` (content key -> PartitionRuntime)."""
    try:
        runs = [runtimes[key].run for key, _refs in plan.steps]
    except KeyError:
        return None
    outputs = plan.outputs
    if len(runs) == 1:  # one partition (the usual fully delegated graph): no intermediate values to keep
        run, picks = runs[0], [i for _s, i in plan.steps[0][1]]
        take = [j for _s, j in outputs]

        def direct(*args):
            results = run([args[i] for i in picks], ())
            return [results[j] for j in take]
        return direct
    steps = [(run, refs) for run, (_key, refs) in zip(runs, plan.steps)]

    def direct_steps(*args):
        values = []
        for run, refs in steps:
            values.append(run([args[i] if s == _INPUT else values[s][i] for s, i in refs], ()))
        return [values[s][j] for s, j in outputs]
    return direct_steps


def baked_inputs(graph: fx.GraphModule, weights: Mapping[int, torch.Tensor], kept: list) -> list:
    """Positions among the compiled ``graph``'s inputs of the weights whose values live only inside engines:
    weights (``weights``: graph input position -> tensor) that a delegated partition in ``kept`` baked in as
    constants, and that nothing else in the compiled graph reads, so no compiled code ever looks at the tensor
    passed at call time."""
    in_engines = {id(getattr(d.extracted.module, name)) for d in kept for name in d.extracted.constant_names}
    read = [bool(n.users) for n in graph.graph.nodes if n.op == "placeholder"]
    return sorted(i for i, t in weights.items() if i < len(read) and not read[i] and id(t) in in_engines)
