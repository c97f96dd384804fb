"""Content keys of delegated partitions: a hash of everything that changes the engine built from them.

A key covers
- the lowered partition (``canonical_model_bytes``): the ONNX graph with value names renumbered in order of
  appearance and names, doc strings, producer fields and metadata dropped, so re-tracing the same model or
  renaming Python variables and attributes gives the same key; weights (initializers) by content;
- the input specs (shape, dtype, strides, device type);
- the delegate and the options it reads (provider, precision, threads, workspace...);
- the ``environment``: versions of hybrid_trt, torch, onnx and the delegate's library, the CUDA version, and
  the device it builds for (GPU compute capability and name, or the CPU's instruction set, which ONNX Runtime's
  optimized CPU models depend on).

``environment`` also returns ``gpu`` (device name) for CUDA and
``cpu`` (architecture and ISA flags) for every device; an input spec may also be given as a tensor.
The device *index* is not part of the key: an engine built on one GPU loads on any GPU of the same
architecture and name, which is what lets eight workers on one box share one build.
"""
from __future__ import annotations

import functools
import hashlib
import json
import platform
from typing import Any, Iterator, Mapping, Sequence

import onnx
import torch

# Bumped when what an engine is built from changes outside its lowered model and options (hybrid_trt's sources are
# not in the key): 2, the TF32 switch decided from float32 ops only (delegates/tf32.py), so engines stored with
# the old decision are not loaded.
KEY_FORMAT = 2
# Fields of TensorProto holding data; the structure keeps everything else (name, dims, dtype, location).
_DATA_FIELDS = frozenset({"raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data",
                          "uint64_data"})
# x86 flags that select ONNX Runtime's CPU kernels (MLAS) and layout transformations.
_X86_ISA = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
            "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def environment(delegate_name: str, device) -> dict[str, str]:
    """Everything about this process and machine that changes an engine of ``delegate_name`` on ``device``."""
    import hybrid_trt  # late: this module is imported while the package initialises
    device = torch.device(device)
    env = {
        "hybrid_trt": str(getattr(hybrid_trt, "__version__", "unknown")),
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "library": f"{delegate_name} {_library_version(delegate_name)}",
        "cuda": str(torch.version.cuda),
        "cpu": _cpu_isa(),
        "gpu_arch": "cpu",
    }
    if device.type == "cuda":
        try:
            major, minor = torch.cuda.get_device_capability(device)
            env["gpu_arch"] = f"sm_{major}{minor}"
            env["gpu"] = torch.cuda.get_device_name(device)
        except (RuntimeError, AssertionError) as e:  # no driver: nothing can be built for it anyway
            env["gpu_arch"] = f"unknown ({type(e).__name__})"
    elif device.type != "cpu":
        env["gpu_arch"] = device.type
    return env


def _library_version(delegate_name: str) -> str:
    try:
        from ..delegates.registry import get_delegate
        version = getattr(get_delegate(delegate_name), "library_version", None)
        if callable(version):
            return str(version())
    except (KeyError, ImportError):
        pass
    try:
        module = __import__(delegate_name)
    except ImportError:
        return "not installed"
    return str(getattr(module, "__version__", "unknown"))


@functools.lru_cache(maxsize=1)
def _cpu_isa() -> str:
    machine = platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() == "flags":  # x86: keep the kernel-selecting flags, not virtualisation noise
                    flags = set(value.split())
                    return machine + " " + " ".join(f for f in _X86_ISA if f in flags)
                if name.strip() == "Features":  # arm
                    return machine + " " + " ".join(sorted(value.split()))
    except OSError:
        pass
    return machine


# ---------------------------------------------------------------------------------------------- the model


def canonical_model_bytes(model: onnx.ModelProto) -> bytes:
    """Deterministic bytes of ``model`` without its non-semantic fields; weights included by content.

    It is the concatenation of the chunks ``engine_key`` hashes one by one (so the key never needs these bytes
    in one piece): the canonical structure with initializer data left out, then each initializer's data,
    length-prefixed, in graph order."""
    return b"".join(_canonical_chunks(model))


def _canonical_chunks(model: onnx.ModelProto) -> Iterator[bytes]:
    structure = _canonical_structure(model)
    blob = structure.SerializeToString(deterministic=True)
    yield len(blob).to_bytes(8, "little")
    yield blob
    for tensor in model.graph.initializer:
        data = _tensor_data(tensor)
        yield len(data).to_bytes(8, "little")
        yield data
        del data  # protobuf hands raw_data out as a copy: hold one initializer's at a time


def _tensor_data(tensor: onnx.TensorProto) -> bytes:
    if tensor.raw_data:
        return tensor.raw_data  # no copy: hashlib reads the protobuf's buffer
    typed = onnx.TensorProto()  # typed fields (small tensors): their serialization is their content
    for field, value in tensor.ListFields():
        if field.name in _DATA_FIELDS and field.name != "raw_data":
            getattr(typed, field.name).extend(value)  # the typed data fields are all repeated
    return typed.SerializeToString(deterministic=True)


def _canonical_structure(model: onnx.ModelProto) -> onnx.ModelProto:
    """A new model with the semantic fields of ``model``, initializer data left out, names canonical."""
    out = onnx.ModelProto()
    out.ir_version = model.ir_version
    out.opset_import.extend(sorted(model.opset_import, key=lambda o: (o.domain, o.version)))
    for function in model.functions:  # local functions: their own scope, only doc strings dropped
        f = out.functions.add()
        f.CopyFrom(function)
        f.ClearField("doc_string")
        for node in f.node:
            node.ClearField("doc_string")
    _copy_graph(model.graph, out.graph, strip_data=True)
    _canonicalise(out.graph, {})
    return out


def _copy_graph(src: onnx.GraphProto, dst: onnx.GraphProto, strip_data: bool) -> None:
    copy_fields(src, dst, skip={"initializer"} if strip_data else set())
    if strip_data:
        for tensor in src.initializer:
            copy_fields(tensor, dst.initializer.add(), skip=_DATA_FIELDS)


def copy_fields(src, dst, skip) -> None:
    """Copy the fields of protobuf message ``src`` set there into ``dst``, but those named in ``skip``."""
    for field, value in src.ListFields():
        if field.name in skip:
            continue
        if _repeated(field):
            getattr(dst, field.name).extend(value)
        elif field.message_type is not None:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


def _repeated(field) -> bool:
    is_repeated = getattr(field, "is_repeated", None)  # newer protobuf; ``label`` before (since removed)
    return bool(is_repeated) if is_repeated is not None else field.label == field.LABEL_REPEATED


def _clear(message, *fields: str) -> None:
    for field in fields:
        if field in message.DESCRIPTOR.fields_by_name:  # metadata_props exists from IR version 10 on
            message.ClearField(field)


def _canonicalise(graph: onnx.GraphProto, names: dict[str, str]) -> None:
    """Rename every value in order of first appearance and drop names, doc strings and metadata, in place."""
    def rename(old: str) -> str:
        if not old:
            return old  # an omitted optional input
        new = names.get(old)
        if new is None:
            new = names[old] = f"v{len(names)}"
        return new

    _clear(graph, "name", "doc_string", "metadata_props")
    for info in graph.input:
        info.name = rename(info.name)
        info.ClearField("doc_string")
    for tensor in graph.initializer:
        tensor.name = rename(tensor.name)
        tensor.ClearField("doc_string")
    for sparse in graph.sparse_initializer:
        sparse.values.name = rename(sparse.values.name)
    for node in graph.node:
        _clear(node, "name", "doc_string", "metadata_props")
        node.input[:] = [rename(n) for n in node.input]
        for attr in node.attribute:
            attr.ClearField("doc_string")
            if attr.HasField("t"):
                attr.t.ClearField("name")
                attr.t.ClearField("doc_string")
            if attr.HasField("g"):
                _canonicalise(attr.g, names)
            for sub in attr.graphs:
                _canonicalise(sub, names)
        node.output[:] = [rename(n) for n in node.output]
    for info in list(graph.output) + list(graph.value_info):
        info.name = rename(info.name)
        info.ClearField("doc_string")
    for annotation in graph.quantization_annotation:
        annotation.tensor_name = rename(annotation.tensor_name)


# ---------------------------------------------------------------------------------------------- the key


def engine_key(*, model: onnx.ModelProto, input_specs: Sequence, delegate: str,
               delegate_options: Mapping[str, Any], environment: Mapping[str, str]) -> str:
    """Hex sha256 of everything that changes the engine of ``model`` for these inputs (see the module doc)."""
    return _digest(model, [_spec(s) for s in input_specs], delegate, delegate_options, environment)


def _digest(model, specs, delegate, delegate_options, environment) -> str:
    header = json.dumps({"format": KEY_FORMAT, "delegate": delegate, "options": _jsonable(delegate_options),
                         "environment": _jsonable(environment), "input_specs": specs},
                        sort_keys=True, separators=(",", ":")).encode()
    h = hashlib.sha256()
    h.update(len(header).to_bytes(8, "little"))
    h.update(header)
    for chunk in _canonical_chunks(model):
        h.update(chunk)
        del chunk  # before the next initializer's copy is made
    return h.hexdigest()


def _spec(spec) -> list:
    if isinstance(spec, torch.Tensor):
        spec = (spec.shape, spec.dtype, spec.stride(), spec.device)
    shape, dtype, strides, device = spec
    return [[_int_or_str(s) for s in shape], str(dtype),
            None if strides is None else [_int_or_str(s) for s in strides], torch.device(device).type]


def _int_or_str(size) -> Any:
    try:
        return int(size)
    except (TypeError, ValueError, RuntimeError):  # a symbolic size: its expression
        return str(size)


def _jsonable(value) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_jsonable(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)  # dtypes, devices, enums, paths: their repr names them exactly
