"""The plugin registry: families of custom ops that bring their own lowerings (and TensorRT plugins).

A plugin has two halves. Its torch ops exist once its package is imported, which a model that uses them has
done. What the backend adds for them (lowerings to the plugin's ONNX domain, the domain accepted by a
delegate, TensorRT plugin creators) is registered by its activation function. This registry calls that
function the first time a graph the backend or export is given calls one of the plugin's ops, never as a side
effect of importing the plugin. So a process that imports a plugin compiles every other model exactly as
before: the same lowerings, the same decompositions, the same engine keys.

hybrid_trt's own plugins are declared below. Another package declares its plugin with ``register_plugin``.
"""
from __future__ import annotations

import dataclasses
import importlib
import threading

import torch.fx as fx

from ..log import logger


@dataclasses.dataclass(frozen=True)
class Plugin:
    name: str
    op_prefix: str  # qualified op names it owns start with this, e.g. "hybrid_trt::sparse_"
    activation: str  # "module:function" whose call registers its lowerings (and TensorRT plugins)
    # HYBRID_TRT_* environment variables the plugin reads itself: not backend options, so the options' check of
    # unknown HYBRID_TRT_* names lets exactly these through.
    env_vars: tuple[str, ...] = ()

    def owns(self, target) -> bool:
        return _qualified_name(target).startswith(self.op_prefix)


_PLUGINS: dict[str, Plugin] = {
    "sparse": Plugin("sparse", "hybrid_trt::sparse_", "hybrid_trt.plugins.sparse.activation:activate",
                     env_vars=("HYBRID_TRT_SPARSE_AUTOTUNE", "HYBRID_TRT_SPARSE_TORCH_ONLY")),
}
_ACTIVE: set[str] = set()
_FAILED: set[str] = set()  # activation raised; reported once
_LOCK = threading.RLock()  # a compile reading the lowerings never sees a plugin half registered


def register_plugin(plugin: Plugin) -> Plugin:
    """Declare ``plugin`` (activated when a graph first calls one of its ops)."""
    with _LOCK:
        known = _PLUGINS.get(plugin.name)
        if known is not None and known != plugin:
            raise ValueError(f"a plugin named {plugin.name!r} is already registered ({known}); choose another name")
        _PLUGINS[plugin.name] = plugin
    return plugin


def plugin_env_vars() -> frozenset[str]:
    """The environment variables registered plugins read (``Plugin.env_vars``)."""
    return frozenset(v for p in _plugins() for v in p.env_vars)


def _plugins() -> list[Plugin]:
    with _LOCK:  # a copy: a plugin registered from another thread meanwhile cannot break an iteration
        return list(_PLUGINS.values())


def active() -> frozenset[str]:
    return frozenset(_ACTIVE)


def activate(name: str) -> None:
    """Register plugin ``name``'s lowerings now (idempotent)."""
    with _LOCK:
        if name in _ACTIVE:
            return
        plugin = _PLUGINS.get(name)
        if plugin is None:
            raise KeyError(f"no plugin named {name!r}; registered: {sorted(_PLUGINS)}")
        module, _, function = plugin.activation.partition(":")
        if not function:
            raise ValueError(f"plugin {name!r}: activation {plugin.activation!r} is not 'module:function'")
        getattr(importlib.import_module(module), function)()
        _ACTIVE.add(name)
    logger.debug("hybrid_trt: plugin %r activated (%s)", name, plugin.activation)


def activate_all() -> None:
    """Activate every registered plugin that activates here (a failure is reported once, as in
    ``activate_for``). Called before a TensorRT engine is deserialised: it may hold any plugin's nodes, and
    TensorRT finds their creators only if registered first."""
    for plugin in _plugins():
        _activate_or_report(plugin)


def callers_of(graph: fx.Graph) -> tuple[str, ...]:
    """Names of the registered plugins whose ops ``graph`` (or a subgraph of its module) calls. An exported
    package records them, so that loading it activates them before loading any engine."""
    targets = {node.target for node in _call_nodes(graph)}
    return tuple(p.name for p in _plugins() if any(p.owns(t) for t in targets))


def activate_for(graph: fx.Graph) -> tuple[str, ...]:
    """Activate every plugin whose ops ``graph`` (or a subgraph of its module: checkpointed or ``cond``
    bodies) calls; returns the names activated now. A plugin whose activation fails is reported once and not
    tried again: its ops stay with Inductor, which runs their torch implementations, so the compile goes on."""
    if all(p.name in _ACTIVE or p.name in _FAILED for p in _plugins()):
        return ()
    now = []
    for name in callers_of(graph):
        if name not in _ACTIVE and name not in _FAILED and _activate_or_report(_plugin(name)):
            now.append(name)
    return tuple(now)


def foreign_targets(graph: fx.Graph) -> frozenset:
    """The lowered targets that belong to plugins ``graph`` does not call: the graph key leaves them out, so
    that a plugin activated by another model in this process does not change this model's key."""
    called = set(callers_of(graph))
    others = [p for p in _plugins() if p.name not in called]
    from ..lowerings.registry import registered_targets
    return frozenset(t for t in registered_targets() if any(p.owns(t) for p in others))


def _plugin(name: str) -> Plugin:
    with _LOCK:
        return _PLUGINS[name]


def _activate_or_report(plugin: Plugin) -> bool:
    if plugin.name in _FAILED:
        return False
    try:
        activate(plugin.name)
    except Exception as e:  # noqa: BLE001 - a broken plugin must not fail the compile
        _FAILED.add(plugin.name)
        logger.warning("hybrid_trt: plugin %r could not be activated (%s: %s); its ops run in Inductor. "
                       "Fix or reinstall the plugin to delegate them.", plugin.name, type(e).__name__, e)
        return False
    return True


def _call_nodes(graph: fx.Graph):
    """The call_function nodes of ``graph`` and of every graph module under the module that owns it."""
    owner = getattr(graph, "owning_module", None)
    graphs = [graph] + ([m.graph for m in owner.modules() if isinstance(m, fx.GraphModule) and m.graph is not graph]
                        if owner is not None else [])
    for g in graphs:
        for node in g.nodes:
            if node.op == "call_function":
                yield node


def _qualified_name(target) -> str:
    """``namespace::name`` of an op overload or packet; "" for anything else (Python functions, builtins)."""
    name = getattr(target, "_qualified_op_name", None)  # OpOverloadPacket
    if name is None:
        schema = getattr(target, "_schema", None)  # OpOverload
        name = getattr(schema, "name", None)
    return name if isinstance(name, str) else ""
