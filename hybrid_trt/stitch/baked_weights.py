"""A call whose weights are not the ones baked into the engines never runs those engines.

Dynamo compiles a frame once and serves every later call that passes the frame's guards. With nn modules inlined
(torch's default), a module's parameters and buffers are graph inputs guarded by their metadata only, so the
instances of one module class whose forward is a frame of its own share one compiled graph: repeated blocks with
a graph break inside their forward (timm's sequencer2d: an LSTM in every block), or each block compiled on its own
(``block.compile(...)``). Inductor reads the weights it is passed and is right for each; hybrid_trt bakes the
weights of the instance it compiled into its engines, so another instance would get the first one's results.

A buffer other than batch-norm statistics is state rather than a weight (camera intrinsics a caller updates in
place between frames): its version counter is compared at every call (``state_buffers``), and once it changed
the graph runs through Inductor alone, which reads it at each call.

Weights changed in place (``load_state_dict``, a train-mode forward updating batch-norm statistics, an optimizer
step) keep their identity, so the identity check cannot see them: the version counters of up to
``VERSIONS_CHECKED`` parameters and as many batch-norm statistics, spread over the graph's weights, are read
before and after each call (2-3 us per call with EfficientNet-B0's 312 arguments on the 2-core CPU). Such updates
change every weight or every statistic, so a sample sees them; a change to a few weights elsewhere may not be
seen (README: call ``torch._dynamo.reset()``). A change compiles the graph again for the new
contents, whose engines the store keys by content (up to ``MAX_WEIGHT_SETS`` times, then Inductor alone).

A weight object replaced by another (``module.weight = nn.Parameter(w)``) where no sample looks is seen through
torch's global parameter registration hook (``_Reregistered``): after any registration in the process, the next
call compares every weight by identity.

So the callable Dynamo's frame calls compares weights it is passed, by identity, with those baked: up to
``CHECKED`` of them, spread over the graph's weight inputs (instances of a module class differ in every weight; all
312 of EfficientNet-B0's took 13-24 us per call on the 2-core CPU; with eight the wrapper adds 2.7 us, mostly
passing the 313 arguments on). A call with other
weights (another instance) is served by a compile of the captured graph for those weights, made at their first
call: hybrid_trt again (its engines found in the store when the weights' contents were built
before), for up to ``MAX_WEIGHT_SETS`` sets of weights, then Inductor alone for any other. A freed tensor drops
the compile made for it (its id could be reused by another tensor).
"""
from __future__ import annotations

import contextlib
import functools
import operator
import threading
import weakref
from typing import Callable, Mapping

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor

from ..log import TORCH_CPP_BUILDER, logger, quiet


def copy_graph(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of Dynamo's graph sharing its attributes, taken before anything rewrites it (hybrid_trt's capture
    passes and Inductor's pre-grad passes change ``gm`` in place)."""
    graph = fx.Graph()
    graph._codegen = gm.graph._codegen
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    copy = fx.GraphModule(gm, graph)
    if hasattr(gm, "compile_subgraph_reason"):  # Dynamo's record of a graph break, which placement reads
        copy.compile_subgraph_reason = gm.compile_subgraph_reason
    return copy


MAX_WEIGHT_SETS = 16  # compiles with engines per captured graph; further weight sets run through Inductor alone
CHECKED = 8  # weights compared per call
VERSIONS_CHECKED = 4  # parameters, and as many other weights, whose version counters are read per call


def _spread(positions: list, n: int) -> list:
    """At most ``n`` of ``positions``, evenly spaced, the first and the last included."""
    if len(positions) <= n:
        return positions
    return sorted({positions[round(k * (len(positions) - 1) / (n - 1))] for k in range(n)})


def _state(original: fx.GraphModule, weights: Mapping[int, torch.Tensor]) -> list:
    """Positions of the weights that are model state rather than weights: buffers that something other than
    batch norm reads (a camera's intrinsics, anchors, a calibration a caller updates in place between frames).
    Parameters and batch-norm statistics are weights, changed only by loading new ones (see the README on
    changing weights)."""
    placeholders = [n for n in original.graph.nodes if n.op == "placeholder"]
    out = []
    for i, t in weights.items():
        if isinstance(t, torch.nn.Parameter) or i >= len(placeholders):
            continue
        users = placeholders[i].users
        if not all(u.target in _BATCH_NORM and any(u.args[k] is placeholders[i] for k in (1, 2) if k < len(u.args))
                   for u in users):
            out.append(i)
    return sorted(out)


def state_buffers(original: fx.GraphModule, weights: Mapping[int, torch.Tensor]) -> list:
    """Positions of the state (``_state``) baked into engines and watched per call (``checked``), few as such
    buffers are."""
    return [i for i in _state(original, weights) if not weights[i].is_inference()]


def unwatchable_state(gm: fx.GraphModule, weights: Mapping[int, torch.Tensor]) -> list:
    """Positions of state that no call could see change: an inference tensor (a buffer made under
    ``torch.inference_mode()``, a common way to build a model for deployment) has no version counter, and
    ``buf.copy_(new)`` keeps its memory. Such state is not baked: it stays an input of the engines, read at
    every call."""
    return [i for i in _state(gm, weights) if weights[i].is_inference()]


_BATCH_NORM = (torch.nn.functional.batch_norm, torch.batch_norm)


def checked(compiled: Callable, weights: Mapping[int, torch.Tensor], original: fx.GraphModule, graph_index: int,
            compile_hybrid: Callable, compile_inductor: Callable = None,
            on_inductor_alone: Callable[[str], None] = lambda why: None) -> Callable:
    """``compiled`` (Dynamo's arguments in), run while the arguments at the positions of ``weights`` are those
    tensors; with others, a compile of ``original`` (the captured graph) for them: ``compile_hybrid(gm, args)``,
    or Inductor's (``compile_inductor(gm, args)``, default ``compile_fx``). Once a state buffer
    (``state_buffers``) that went into engines is changed in place, every call runs through Inductor alone, which
    reads it at each call (and ``on_inductor_alone(why)`` records that)."""
    positions = _spread(sorted(weights), CHECKED)
    if not positions:
        return compiled
    if any(w.is_inference() for w in weights.values()):
        _warn_inference_weights()
    pick = operator.itemgetter(*positions)
    ids = (lambda args: (id(pick(args)),)) if len(positions) == 1 else (lambda args: tuple(map(id, pick(args))))
    expected = ids([weights.get(i) for i in range(positions[-1] + 1)])
    state = state_buffers(original, weights)
    versioned = _versioned(weights, state)
    others = _OtherWeights(original, positions, ids, graph_index, compile_hybrid, versioned, compile_inductor,
                           weight_positions=sorted(weights), on_inductor_alone=on_inductor_alone)
    stale = [False]
    for i in positions:
        weakref.finalize(weights[i], stale.__setitem__, 0, True)
    if versioned:
        compiled = _Refreshed(compiled, versioned, [weights[i] for i in versioned], others)
    main = _Reregistered(compiled, sorted(weights), weights, others)
    if not state:
        def call(*args):
            if not stale[0] and ids(args) == expected:
                if main.seen != _registrations[0]:
                    main.recheck(args)
                return main.compiled(*args)
            return others(args)
        return call
    # Version and memory of each state buffer (``buf.data = new`` gives it other storage without touching its
    # version counter), read again after every call: a buffer the graph itself updates (a step counter) changes
    # inside the call, which is no change from outside; a call never moves a buffer's memory.
    def seen(tensors) -> list:
        return [(tensors[i]._version, tensors[i].data_ptr()) for i in state]

    last = [seen(weights)]
    plain: list = []  # Inductor alone, once a state buffer changed

    def call_watching_state(*args):
        if plain:
            return plain[0](*args)
        if not stale[0] and ids(args) == expected:
            if seen(args) == last[0]:
                if main.seen != _registrations[0]:
                    main.recheck(args)
                out = main.compiled(*args)
                last[0] = seen(args)
                return out
            with others.lock:
                if not plain:
                    why = ("a buffer baked into its engines was changed in place or given new memory (e.g. copy_ "
                           "of new camera parameters, buf.data = new)")
                    logger.warning("hybrid_trt: graph %d: %s; from now on this graph runs through Inductor alone, "
                                   "which reads it at every call", graph_index, why)
                    plain.append(others._inductor(list(args)))
                    on_inductor_alone(f"{why}, at a call")
            return plain[0](*args)
        return others(args)
    return call_watching_state


# Events that may change weights a sample does not look at, counted by torch's global hooks (installed by the
# first compile): parameters (re)registered on any module (``module.weight = nn.Parameter(w)``,
# ``load_state_dict(assign=True)`` replace a weight object, which a sample of identities, ``CHECKED``, misses
# unless it is sampled), and optimizer steps (fine-tuning one block of a model changes weights the version sample,
# ``VERSIONS_CHECKED``, may not hold). Counting costs one increment per event; a call compares one integer. Not
# the buffer hook: a model's own forward reassigns buffers (``self.count += 1`` is a setattr), and with a global
# buffer hook installed Dynamo traces that differently (the buffer came back as a new tensor each call, seen as
# changed state).
_registrations = [0]
_registration_hooks: list = []
_hooks_lock = threading.Lock()


def _count_registrations() -> None:
    def counted(*_args):
        _registrations[0] += 1  # returns None: the registered object (or the optimizer's step) is left as it is

    with _hooks_lock:
        if not _registration_hooks:
            from torch.nn.modules import module
            from torch.optim.optimizer import register_optimizer_step_post_hook
            _registration_hooks.append(module.register_module_parameter_registration_hook(counted))
            _registration_hooks.append(register_optimizer_step_post_hook(counted))


class _Reregistered:
    """The callable for the baked weights, checked against all of them after any registration or optimizer step
    in the process: a baked weight replaced by another object (``module.weight = nn.Parameter(w)``, not at a
    sampled position), or a parameter whose version moved (an optimizer step on one block), compiles the graph
    again for the new weights. Without such an event, a call costs one integer comparison (made by the caller,
    before ``recheck``)."""

    def __init__(self, compiled: Callable, positions: list, weights: Mapping[int, torch.Tensor],
                 others: "_OtherWeights"):
        _count_registrations()
        self.compiled, self.others = compiled, others
        self.pick = operator.itemgetter(*positions, positions[0])  # a tuple, however many
        self.ids = tuple(map(id, self.pick([weights.get(i) for i in range(positions[-1] + 1)])))
        # parameters only: batch-norm statistics a train-mode forward updates inside the call are no change
        params = [i for i in positions if isinstance(weights[i], torch.nn.Parameter) and not weights[i].is_inference()]
        self.pick_params = operator.itemgetter(*params, params[0]) if params else lambda args: ()
        self.versions = tuple(map(_version, self.pick_params([weights.get(i) for i in range(positions[-1] + 1)])))
        self.seen = _registrations[0]
        self._follow(compiled)

    def _follow(self, compiled) -> None:
        """The versions a compile baked: also those of a compile the sample made (``_Refreshed``), or the next
        event would compile the same weights again."""
        if isinstance(compiled, _Refreshed):
            compiled.on_recompile = self._rebase

    def _rebase(self, args) -> None:
        self.versions = tuple(map(_version, self.pick_params(args)))

    def recheck(self, args) -> None:
        """Called when a registration or an optimizer step happened since the last check (``seen``): a compile for
        replaced or changed weights."""
        with self.others.lock:
            seen = _registrations[0]
            now = tuple(map(id, self.pick(args)))
            versions = tuple(map(_version, self.pick_params(args)))
            if now != self.ids or versions != self.versions:
                others = self.others
                fn = others.recompile(list(args), others.REPLACED if now != self.ids else others.IN_PLACE)
                self.compiled = _Refreshed(fn, others.versioned, [args[i] for i in others.versioned], others) \
                    if others.versioned else fn
                self.ids, self.versions = now, versions
                self._follow(self.compiled)
            self.seen = seen


@functools.cache
def _warn_inference_weights() -> None:
    # Once per process: the model is built that way once, and said to be before it is changed, not after.
    logger.warning(
        "hybrid_trt: the model's weights are inference tensors (created under torch.inference_mode()), which keep "
        "no version counter: delegated partitions bake them at compile time, and a later in-place change "
        "(load_state_dict, param.mul_(...)) cannot be seen, so calls would keep the weights baked now. Load the "
        "weights before compiling and call torch._dynamo.reset() after changing them, or build the model outside "
        "torch.inference_mode() (calling it under inference_mode is fine)")


def _versioned(weights: Mapping[int, torch.Tensor], state: list) -> list:
    """Positions of the weights whose version counters are compared per call: up to ``VERSIONS_CHECKED``
    parameters and as many other weights (batch-norm statistics), spread over the graph. Inference tensors have
    no version counter (a model built under ``torch.inference_mode()``) and are left out."""
    candidates = [i for i in sorted(weights) if i not in state and not weights[i].is_inference()
                  and weights[i].layout is torch.strided]  # a sparse weight has no data_ptr to compare
    params = [i for i in candidates if isinstance(weights[i], torch.nn.Parameter)]
    buffers = [i for i in candidates if not isinstance(weights[i], torch.nn.Parameter)]
    return sorted(_spread(params, VERSIONS_CHECKED) + _spread(buffers, VERSIONS_CHECKED))


_version = operator.attrgetter("_version")
_data_ptr = torch.Tensor.data_ptr


class _Refreshed:
    """``compiled`` while the sampled weights keep the versions and the memory they had when it was compiled; once
    one changed in place (new weights loaded into the same tensors), a compile of the captured graph for the new
    contents. The memory is compared because ``param.data = new`` (EMA and weight-averaging code, older training
    loops) gives a parameter other storage without touching its version counter. Versions are read again after
    each call: a graph that updates its own statistics (a train-mode forward) is no change from outside; a call
    never moves a weight's memory, which is read before it only (1.3 us for the sample on the 2-core CPU)."""

    def __init__(self, compiled: Callable, positions: list, tensors: list, others: "_OtherWeights"):
        self.compiled, self.others = compiled, others
        self.pick = operator.itemgetter(*positions, positions[0])  # two or more: itemgetter returns a tuple
        self.seen = tuple(map(_version, tensors + tensors[:1]))
        self.memory = tuple(map(_data_ptr, tensors + tensors[:1]))
        self.on_recompile = None  # told the call's arguments after a compile for new contents (_Reregistered)

    def versions(self, args) -> tuple:
        return tuple(map(_version, self.pick(args)))

    def changed(self, args) -> bool:
        picked = self.pick(args)
        return tuple(map(_version, picked)) != self.seen or tuple(map(_data_ptr, picked)) != self.memory

    def __call__(self, *args):
        if self.changed(args):
            with self.others.lock:
                if self.changed(args):
                    self.compiled = self.others.recompile(list(args))
                    self.seen = self.versions(args)
                    self.memory = tuple(map(_data_ptr, self.pick(args)))
                    if self.on_recompile is not None:
                        self.on_recompile(args)
        out = self.compiled(*args)
        self.seen = self.versions(args)
        return out


class _OtherWeights:
    """Compiles of the captured graph for other weights, by the ids of those weights, made at their first call
    under a lock (two threads with new weights compile once)."""

    def __init__(self, gm: fx.GraphModule, positions: list, ids: Callable, graph_index: int,
                 compile_hybrid: Callable, versioned: list = (), compile_inductor: Callable = None,
                 weight_positions: list = (), on_inductor_alone: Callable[[str], None] = lambda why: None):
        self.gm, self.positions, self.ids, self.graph_index = gm, positions, ids, graph_index
        self.on_inductor_alone = on_inductor_alone  # the report's: the whole graph runs on Inductor from then on
        self.compile_hybrid, self.versioned = compile_hybrid, list(versioned)
        self.weight_positions = list(weight_positions)
        self.traced = _TracedExamples(gm, weight_positions)
        if compile_inductor is None:
            from torch._inductor.compile_fx import compile_fx as compile_inductor
        self.compile_inductor = compile_inductor
        self.compiled: dict = {}  # ids of the weights -> callable
        self.plain = None  # Inductor alone, past MAX_WEIGHT_SETS
        self.refreshes = 0  # compiles for weights changed in place
        self.lock = threading.Lock()

    # What changed, for the warning: weights changed in place (_Refreshed), or a weight object replaced (_Reregistered).
    # "compiled with", not "baked": the sample watches every weight the graph reads, those only Inductor's code reads
    # too (a change there alone recompiles what did not need it; telling them apart per call would cost more).
    IN_PLACE = ("weights it was compiled with were changed in place (e.g. load_state_dict, or batch-norm statistics "
                "updated by a train-mode forward)")
    REPLACED = "a weight it was compiled with was replaced by another tensor (e.g. module.weight = nn.Parameter(...))"

    def recompile(self, args: list, change: str = IN_PLACE) -> Callable:
        """A compile for the weights of a call whose baked weights changed since the last one (called under
        ``lock``); past ``MAX_WEIGHT_SETS`` changes, Inductor alone."""
        self.refreshes += 1
        if self.refreshes > MAX_WEIGHT_SETS:
            why = (f"weights were changed {MAX_WEIGHT_SETS} times; from now on it runs through Inductor alone, which "
                   "reads them at every call")
            if self.plain is None:
                self.on_inductor_alone(why)
            return self._past_bound(args, why)
        logger.warning("hybrid_trt: graph %d: %s; compiling it again for the new weights", self.graph_index, change)
        return self._compile_for(args, "the new weights")

    def _past_bound(self, args: list, why: str) -> Callable:
        if self.plain is None:
            logger.warning("hybrid_trt: graph %d: %s", self.graph_index, why)
            self.plain = self._inductor(args)
        return self.plain

    def _compile_for(self, args: list, what: str) -> Callable:
        try:
            with self.traced.context(args) as examples:
                return self.compile_hybrid(copy_graph(self.gm), examples)
        except Exception as e:  # noqa: BLE001 - Inductor alone serves them then
            logger.warning("hybrid_trt: graph %d: compiling it for %s failed (%s: %s); those calls run through "
                           "Inductor alone", self.graph_index, what, type(e).__name__, e)
            return self._inductor(args)

    def __call__(self, args):
        key = self.ids(args)
        fn = self.compiled.get(key)
        if fn is None:
            with self.lock:
                fn = self.compiled.get(key) or self._compile(key, list(args))
        if type(fn) is _Reregistered:  # checked here, as ``checked``'s call does: no extra call layer per call
            if fn.seen != _registrations[0]:
                fn.recheck(args)
            return fn.compiled(*args)
        return fn(*args)

    def _compile(self, key: tuple, args: list) -> Callable:
        if len(self.compiled) >= MAX_WEIGHT_SETS:
            return self._past_bound(args, f"served {MAX_WEIGHT_SETS} sets of weights (module instances sharing one "
                                          "compiled frame); calls with any other run through Inductor alone")
        logger.info("hybrid_trt: graph %d is called with weights other than those it was compiled with (another "
                    "instance of a module whose forward Dynamo compiled as a frame of its own); compiling it for "
                    "them", self.graph_index)
        fn = self._compile_for(args, "other weights")
        if self.versioned:
            fn = _Refreshed(fn, self.versioned, [args[i] for i in self.versioned], self)
        # This instance's weights may be replaced later too (``module.weight = nn.Parameter(w)`` at a position the
        # key does not sample), as the first instance's may.
        if self.weight_positions:
            fn = _Reregistered(fn, self.weight_positions, {i: args[i] for i in self.weight_positions}, self)
        self.compiled[key] = fn
        for i in self.positions:
            weakref.finalize(args[i], self.compiled.pop, key, None)
        return fn

    def _inductor(self, args: list) -> Callable:
        try:
            with self.traced.context(args) as examples, quiet(TORCH_CPP_BUILDER):  # at call time: as backend.py
                return self.compile_inductor(copy_graph(self.gm), examples)
        except Exception as e:  # noqa: BLE001 - the captured graph itself always runs
            logger.warning("hybrid_trt: graph %d: Inductor could not compile it (%s: %s); those calls run the "
                           "captured graph as it is", self.graph_index, type(e).__name__, e)
            return self.gm


class _TracedExamples:
    """What a compile at call time is given: the call's own tensors for the weights (they are what it bakes), and
    for every other argument the example value Dynamo traced the graph with (a fake tensor with symbolic sizes, a
    size symbol, a float's symbol), under a tracing context of their fake mode. Compiled from the call's tensors
    alone, the graph was specialised to that call: a second instance of a module class compiled with
    ``dynamic=True`` failed at its next batch size (its engine expected the first), and a float argument, which
    Dynamo passes as a tensor it reads with ``.item()``, failed to compile at all."""

    def __init__(self, gm: fx.GraphModule, weight_positions):
        values = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
        self.weights = set(weight_positions)
        others = [v for i, v in enumerate(values) if i not in self.weights]
        # The values' own mode: a lookup (detect_fake_mode) would find the backend's (this runs inside its call),
        # whose fakes of the same tensors lack what Dynamo memoised on them (a float's symbol).
        modes = {id(v.fake_mode): v.fake_mode for v in others if isinstance(v, FakeTensor)}
        usable = len(modes) == 1 and all(v is not None for v in others)
        self.fake_mode = next(iter(modes.values())) if usable else None
        self.values = values if usable else None

    @contextlib.contextmanager
    def context(self, args: list):
        if self.values is None or len(args) != len(self.values):  # not Dynamo's graph: the call's tensors
            yield args
            return
        from torch._guards import TracingContext, tracing
        with tracing(TracingContext(self.fake_mode)):
            yield [a if i in self.weights else v for i, (a, v) in enumerate(zip(args, self.values))]
