"""The one immutable, validated options object.

Sources, lowest precedence first: defaults, ``HYBRID_TRT_<KEY>`` environment variables (for deployment), the
``options`` dict given to ``torch.compile``. Unknown keys and bad values raise ValueError naming the key and
what is valid; nothing is dropped silently.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Optional

from .engines.store import DEFAULT_MAX_BYTES

ENV_PREFIX = "HYBRID_TRT_"
PRECISIONS = ("fp32", "fp16", "bf16")
ORT_PROVIDERS = ("auto", "cpu", "cuda", "tensorrt")
PLACEMENTS = ("auto", "delegate", "measured")  # see placement.py and Options.measures_placement
ORT_CUDA_LAYOUTS = ("auto", "nchw", "nhwc")  # see delegates/onnxruntime_delegate.py, cuda_layout_nhwc
CUDA_GRAPH_RUNNERS = ("trees", "whole")  # see cudagraphs.py and whole_graph.py


@dataclasses.dataclass(frozen=True)
class Options:
    delegates: Optional[tuple[str, ...]] = None  # priority order; None = every delegate available here
    min_block_size: int = 3
    force_inductor_ops: frozenset = frozenset()  # e.g. {"aten.convolution", "aten.add.Tensor"}
    precision: str = "fp32"
    strict: bool = False  # raise instead of falling back to Inductor
    print_report: bool = False
    max_engines_per_partition: int = 8
    num_threads: Optional[int] = None  # delegate threads; None = torch.get_num_threads()
    onnxruntime_provider: str = "auto"
    onnxruntime_cuda_layout: str = "auto"  # the CUDA provider's convolution layout (prefer_nhwc)
    tensorrt_workspace_bytes: int = 1 << 30
    cache: bool = True  # engine store on disk, and Inductor's FX-graph and AOTAutograd caches
    cache_dir: Optional[str] = None  # None = $XDG_CACHE_HOME/hybrid_trt, else ~/.cache/hybrid_trt
    cache_max_bytes: int = DEFAULT_MAX_BYTES  # least recently used entries are evicted beyond this
    cuda_graphs: bool = False  # the stitched callable in CUDA graphs (hybrid_trt/cudagraphs.py)
    cuda_graph_runner: str = "trees"  # "trees": Inductor's, in segments; "whole": one graph per call (whole_graph.py)
    placement: str = "auto"  # "measured": a partition stays delegated only where that is faster (placement.py)
    max_autotune: bool = False  # Inductor autotunes the code it compiles (mode="max-autotune"); engines unchanged

    def __post_init__(self):
        # Constructed directly (hybrid_trt.Options(...)) values are validated and normalised like dict options.
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not f.default and not (type(value) is type(f.default) and value == f.default):
                object.__setattr__(self, f.name, _convert(f.name, value))

    def compiled_fields(self) -> dict:
        """The options that change what is compiled (the stitched graph or an engine); caching and printing
        settings do not."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _NOT_COMPILED}
        if not self.cuda_graphs:  # the runner says how graphs run: without them it changes nothing compiled (it is
            del fields["cuda_graph_runner"]  # kept as given, for a mode= that turns graphs on later)
        return fields

    @property
    def inductor_cuda_graphs(self) -> bool:
        """Whether Inductor captures the stitched graph (its CUDA-graph trees); the whole runner captures it
        itself (whole_graph.py) around Inductor's plain compile."""
        return self.cuda_graphs and self.cuda_graph_runner == "trees"

    @property
    def whole_runner(self) -> bool:
        """Whether hybrid_trt's own runner captures each call whole (whole_graph.py)."""
        return self.cuda_graphs and self.cuda_graph_runner == "whole"

    @property
    def inductor_patches(self) -> dict:
        """Inductor settings for every compile hybrid_trt starts (the stitched graph, a graph Inductor takes whole,
        its backward, a partition's fallback, AOTInductor at export): its own max-autotune settings, less CUDA
        graphs (``cuda_graphs`` says where those go)."""
        if not self.max_autotune:
            return {}
        from torch._inductor import list_mode_options
        return {k: v for k, v in list_mode_options("max-autotune-no-cudagraphs").items() if "cudagraphs" not in k}

    def measures_placement(self, device) -> bool:
        """Whether a partition on ``device`` is timed against Inductor before it is delegated. ``auto`` measures
        on a GPU, with or without CUDA graphs: a supported partition is not a faster one there. On the H200 ONNX
        Runtime's CUDA kernels lost to Inductor's in fp16 in every CUDA-graph row (2-2.7x at batch 16), and
        uncaptured the LiDAR example's dense partition took 6.7 ms against Inductor's 3.0 (the whole model 2.1x
        Inductor's time delegated, 1.13x measured; benchmarks/results/cudagraphs_h200.md, session 6). On the
        CPU ``auto`` delegates what a delegate supports, as ``delegate`` does: there ONNX Runtime was the faster
        in most conformance rows (the exceptions, transformers and MLP mixers on its CPU kernels, are listed in
        README "Measured placement"), measuring costs most of the compile time delegating saves (ResNet-18 on 2
        cores: 2.3 s to the first output delegated, 20.3 s measured, session 37), and wall timing of a long
        partition on a loaded CPU is noisier than the margin (benchmarks/results/conformance_cpu_2core_placement.md)."""
        if self.placement == "auto":
            return device.type == "cuda"
        return self.placement == "measured"

    def resolved_delegates(self) -> tuple[str, ...]:
        """The delegates graphs compile with: those named, or every one, usable here as configured (one whose library
        is missing, or lacks what the options ask, is left out with a warning, or raises under ``strict``) that
        build engines at ``precision`` (``delegates.honouring_precision``)."""
        from .delegates import available_delegates, honouring_precision, usable_of
        named = self.delegates is not None
        usable = usable_of(self.delegates if named else available_delegates(), self.strict, self)
        return honouring_precision(usable, self.precision, named, self.strict)


_NOT_COMPILED = frozenset({"print_report", "cache", "cache_dir", "cache_max_bytes"})

_DOCS = {
    "delegates": "list of delegate names in priority order",
    "min_block_size": "int >= 1",
    "force_inductor_ops": "list of ATen op names, e.g. ['aten.convolution', 'aten.add.Tensor']",
    "precision": f"one of {PRECISIONS}",
    "strict": "bool",
    "print_report": "bool",
    "max_engines_per_partition": "int >= 1",
    "num_threads": "int >= 1 or None",
    "onnxruntime_provider": f"one of {ORT_PROVIDERS}",
    "onnxruntime_cuda_layout": f"one of {ORT_CUDA_LAYOUTS}",
    "tensorrt_workspace_bytes": "int >= 1",
    "cache": "bool",
    "cache_dir": "a directory path (created when missing)",
    "cache_max_bytes": "int >= 1",
    "cuda_graphs": "bool",
    "cuda_graph_runner": f"one of {CUDA_GRAPH_RUNNERS}",
    "placement": f"one of {PLACEMENTS}",
    "max_autotune": "bool",
}


def _bad(key: str, value: Any) -> ValueError:
    return ValueError(f"hybrid_trt option {key!r}: invalid value {value!r}; expected {_DOCS[key]}")


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def env_flag(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """A boolean environment variable outside the options (a plugin's own), read with the options' spellings;
    ValueError naming it for anything else, rather than silently taking an unknown spelling as false."""
    value = (os.environ if environ is None else environ).get(name)
    if value is None or value.strip() == "":
        return default
    if value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"environment variable {name}={value!r} is not a boolean; use one of {_TRUE + _FALSE}")


def _as_bool(key, v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):  # strict=1, as the environment's "1"
        return bool(v)
    if isinstance(v, str) and v.lower() in _TRUE + _FALSE:
        return v.lower() in _TRUE
    raise _bad(key, v)


def _as_int(key, v, allow_none=False):
    if v is None and allow_none:
        return None
    if isinstance(v, str) and allow_none and v.lower() in ("", "none"):
        return None
    try:
        if isinstance(v, bool):
            raise TypeError
        out = int(v)
        if isinstance(v, float) and out != v:
            raise ValueError
    except (TypeError, ValueError):
        raise _bad(key, v) from None
    if out < 1:
        raise _bad(key, v)
    return out


def _as_names(key, v) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [s.strip() for s in v.split(",") if s.strip()]
    if not isinstance(v, (list, tuple, set, frozenset)) or not all(isinstance(s, str) for s in v):
        raise _bad(key, v)
    return tuple(v)


def _as_items(key, v) -> list:
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()]
    if not isinstance(v, (list, tuple, set, frozenset)):
        raise _bad(key, v)
    return list(v)


def _as_op_name(key, v) -> str:
    """An op as the partitioner matches it ("aten.convolution", "aten.add.Tensor", "mylib.decode"), from that
    spelling, torch's "aten::convolution" or "torch.ops.aten.convolution", or the op object itself. A name that
    resolves to no registered op is an error (a typo would otherwise keep nothing with Inductor)."""
    import torch
    if isinstance(v, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        name = v._schema.name if isinstance(v, torch._ops.OpOverload) else v._qualified_op_name
        overload = getattr(v, "_overloadname", None)
        return name.replace("::", ".") + (f".{overload}" if overload else "")
    if not isinstance(v, str):
        raise _bad(key, v)
    name = v.strip().replace("::", ".").removeprefix("torch.ops.")
    parts = name.split(".")
    problem = None
    if len(parts) == 1:  # a bare name keeps that op in any namespace (capability.py matches it so)
        if not name:
            problem = "is not an op name"
        elif not _bare_op_registered(name):
            problem = "names no registered op in any namespace"
    elif len(parts) > 3 or not all(parts):
        problem = "is not an op name"
    else:
        try:
            packet = getattr(getattr(torch.ops, parts[0]), parts[1])
        except (AttributeError, RuntimeError):
            problem = f"names no registered op (no {parts[0]}.{parts[1]})"
        else:
            if len(parts) == 3 and parts[2] not in packet.overloads():
                problem = f"names no overload of {parts[0]}.{parts[1]} (it has {sorted(packet.overloads())})"
    if problem:
        raise ValueError(f"hybrid_trt option {key!r}: {v!r} {problem}. Write ops as 'aten.convolution' or "
                         "'aten.add.Tensor' (a custom op as 'namespace.op', registered before torch.compile)")
    never = _never_partitioned(name)
    if never:
        raise ValueError(f"hybrid_trt option {key!r}: {v!r} {never}, so keeping it with Inductor would keep "
                         "nothing there. The ops of a compiled graph are listed by hybrid_trt.last_report()")
    return name


# What the commonest of those ops become in the captured graph, for the error's hint.
_BECOMES = {"conv1d": "aten.convolution", "conv2d": "aten.convolution", "conv3d": "aten.convolution",
            "conv_transpose1d": "aten.convolution", "conv_transpose2d": "aten.convolution",
            "conv_transpose3d": "aten.convolution", "linear": "aten.addmm or aten.mm",
            "matmul": "aten.mm, aten.bmm or aten.addmm", "batch_norm": "aten._native_batch_norm_legit_no_training",
            "layer_norm": "aten.native_layer_norm", "group_norm": "aten.native_group_norm",
            "softmax": "aten._softmax", "log_softmax": "aten._log_softmax", "flatten": "aten.view",
            "reshape": "aten.view", "relu6": "aten.hardtanh", "max_pool2d": "aten.max_pool2d_with_indices"}


def _never_partitioned(name: str) -> Optional[str]:
    """Why the op ``name`` (as matched) never appears in the graph hybrid_trt partitions, or None. Captured graphs are
    functional (no in-place or out= overloads) and ATen's CompositeImplicitAutograd ops are decomposed while they
    are traced, except those hybrid_trt keeps whole (attention, interpolation: partitioner/capability.py)."""
    import torch
    from .partitioner.capability import KEPT_WHOLE_AS
    parts = name.split(".")
    bare = len(parts) == 1
    if bare:  # judged by aten's op of that name (another namespace's is written 'namespace.name')
        if not hasattr(torch.ops.aten, name):
            return None
        parts = ["aten", name]
    packet_name = ".".join(parts[:2])
    if any(packet_name in names for names in KEPT_WHOLE_AS.values()):
        return None
    try:
        packet = getattr(getattr(torch.ops, parts[0]), parts[1])
    except (AttributeError, RuntimeError):
        return None
    ops = [getattr(packet, o) for o in ([parts[2]] if len(parts) == 3 else packet.overloads())]
    functional = [op for op in ops if not op._schema.is_mutable]
    if not functional:
        plain = parts[1].rstrip("_")
        if parts[1].endswith("_") and hasattr(getattr(torch.ops, parts[0]), plain):
            return (f"is an in-place op: captured graphs are functional and hold {parts[0]}.{plain} instead "
                    f"(name that)")
        return "writes to its arguments (an in-place or out= form): captured graphs are functional and never hold it"
    if all(_decomposed_while_traced(op) for op in functional):
        becomes = _BECOMES.get(parts[1]) if parts[0] == "aten" else None
        return ("is decomposed by torch while the graph is captured: it never reaches hybrid_trt's partitioner"
                + (f" (it becomes {becomes}: name that)" if becomes else " (name the ops it becomes)")
                + (" (another namespace's op of this name is written 'namespace.name')" if bare else ""))
    return None


def _decomposed_while_traced(op) -> bool:
    import torch
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")
    except RuntimeError:  # not a dispatcher op (a TorchScript builtin overload such as aten::add.t)
        return False


def _bare_op_registered(name: str) -> bool:
    import torch
    if hasattr(torch.ops.aten, name):
        return True
    return any(op.split("::", 1)[-1].split(".", 1)[0] == name for op in torch._C._dispatch_get_all_op_names())


def _as_dir(key, v) -> Optional[str]:
    if isinstance(v, str):  # "  " or " /data/cache " from a shell or a unit file: a typo, not a directory name
        v = v.strip()
    if v is None or v == "":
        return None
    if not isinstance(v, (str, os.PathLike)):
        raise _bad(key, v)
    return os.path.abspath(os.path.expanduser(os.fspath(v)))


def _as_choice(key, v, choices):
    if v not in choices:
        raise _bad(key, v)
    return v


def _convert(key: str, value: Any) -> Any:
    if key == "delegates":
        from .delegates import delegate_names
        names = _as_names(key, value)
        if not names:
            raise ValueError("hybrid_trt option 'delegates' is empty; name at least one of "
                             f"{list(delegate_names())}, or leave it out to use every available delegate")
        for n in names:
            if n not in delegate_names():
                raise ValueError(f"hybrid_trt option 'delegates': unknown delegate {n!r}; valid: "
                                 f"{list(delegate_names())}")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"hybrid_trt option 'delegates' names {twice} more than once; give each delegate once, "
                             "in priority order")
        return names
    if key in ("min_block_size", "max_engines_per_partition", "tensorrt_workspace_bytes", "cache_max_bytes"):
        return _as_int(key, value)
    if key == "cache_dir":
        return _as_dir(key, value)
    if key == "num_threads":
        return _as_int(key, value, allow_none=True)
    if key == "force_inductor_ops":
        return frozenset(_as_op_name(key, v) for v in _as_items(key, value))
    if key == "precision":
        return _as_choice(key, value, PRECISIONS)
    if key == "onnxruntime_provider":
        return _as_choice(key, value, ORT_PROVIDERS)
    if key == "placement":
        return _as_choice(key, value, PLACEMENTS)
    if key == "onnxruntime_cuda_layout":
        return _as_choice(key, value, ORT_CUDA_LAYOUTS)
    if key == "cuda_graph_runner":
        return _as_choice(key, value, CUDA_GRAPH_RUNNERS)
    if key in ("strict", "print_report", "cache", "cuda_graphs", "max_autotune"):
        return _as_bool(key, value)
    raise AssertionError(key)


def valid_keys() -> list[str]:
    return [f.name for f in dataclasses.fields(Options)]


def from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    from .plugins.registry import plugin_env_vars  # variables plugins read themselves: not options
    environ = os.environ if environ is None else environ
    found, plugin_vars = {}, plugin_env_vars()
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name in plugin_vars:
            continue
        key = name[len(ENV_PREFIX):].lower()
        if key not in valid_keys():
            raise ValueError(f"environment variable {name} is not a hybrid_trt option; valid: "
                             f"{[ENV_PREFIX + k.upper() for k in valid_keys()]}, and plugins read "
                             f"{sorted(plugin_vars)}")
        found[key] = value
    return found


def make_options(options: Mapping[str, Any] | Options | None = None,
                 environ: Mapping[str, str] | None = None, resolve: bool = True) -> Options:
    """``resolve``: check the delegates the options name or imply against this machine (contradictions raise,
    what is unusable is said once per process); without it, only the keys and values are checked."""
    if isinstance(options, Options):
        _from_mapping({}, environ)  # taken as it is, but a bad HYBRID_TRT_* variable is an error here too
        opts = options
    else:
        opts = _from_mapping(options, environ)
    if resolve:
        opts.resolved_delegates()
    return opts


def _from_mapping(options, environ) -> Options:
    if options is not None and not isinstance(options, Mapping):
        raise ValueError(f"hybrid_trt options must be a dict or hybrid_trt.Options, got {type(options).__name__}")
    env = from_env(environ)
    given = dict(options or {})
    merged = {**env, **given}
    unknown = sorted(set(merged) - set(valid_keys()))
    if unknown:
        raise ValueError(f"unknown hybrid_trt option(s) {unknown}; valid options: {valid_keys()}")
    converted = {}
    for key, value in merged.items():
        try:
            converted[key] = _convert(key, value)
        except ValueError as e:
            if key in given:
                raise
            # the value came from the environment: name the variable, where the user has to fix it
            raise ValueError(f"environment variable {ENV_PREFIX}{key.upper()}={value!r}: {e}") from None
    return Options(**converted)
