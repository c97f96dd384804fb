"""An ONNX model as bytes for a delegate, its weights in a file of their own when they pass protobuf's 2 GB limit.

A serialized ModelProto is at most 2 GB (protobuf's limit), so a partition whose weights add up to more (a ViT-H
or a RegNetY-128GF in float32) cannot be handed over as one byte string: the build failed with "Failed to
serialize proto" and the whole partition fell back to Inductor. Such a model is split the way ONNX stores large
models (external data): the graph, each weight replaced by a reference (file name, offset, length), and one file
holding the weights' bytes. Delegates take both: ONNX Runtime from memory, TensorRT's parser from a directory."""
from __future__ import annotations

from typing import Mapping

import onnx

from ..engines.key import copy_fields

# What the weights may add up to before they move out: protobuf's 2 GiB less room for the graph around them.
INLINE_LIMIT = 2**31 - 2**26
# Weights below this size stay in the graph (ONNX's own default threshold for external data).
_MIN_EXTERNAL = 1024
_ALIGN = 64  # offsets of weights in the data file


def serialize(model: onnx.ModelProto, name: str) -> tuple[bytes, dict[str, bytearray]]:
    """``model``'s bytes and its external files ({} when everything fits in the graph). ``name`` is the file name
    the model will have; its weights file is ``name + ".data"``, which the model's references name."""
    if sum(t.ByteSize() for t in model.graph.initializer) <= INLINE_LIMIT:
        return model.SerializeToString(), {}
    location = data_file(name)
    graph_only = onnx.ModelProto()
    copy_fields(model, graph_only, skip={"graph"})
    copy_fields(model.graph, graph_only.graph, skip={"initializer"})
    data = bytearray()
    for tensor in model.graph.initializer:
        out = graph_only.graph.initializer.add()
        if not tensor.HasField("raw_data") or tensor.ByteSize() < _MIN_EXTERNAL:
            out.CopyFrom(tensor)
            continue
        copy_fields(tensor, out, skip={"raw_data"})
        data.extend(bytes(-len(data) % _ALIGN))
        offset = len(data)
        data.extend(tensor.raw_data)  # one weight's copy at a time
        out.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", offset), ("length", len(data) - offset)):
            entry = out.external_data.add()
            entry.key, entry.value = key, str(value)
    return graph_only.SerializeToString(), {location: data}


def data_file(name: str) -> str:
    """The name of the weights file of a model file called ``name``."""
    return name + ".data"


def add_to_session(session_options, files: Mapping[str, bytes]) -> None:
    """Hand external files to an ONNX Runtime session from memory (they must live until the session exists)."""
    if not files:
        return
    if not hasattr(session_options, "add_external_initializers_from_files_in_memory"):
        raise RuntimeError("the partition's weights pass ONNX's 2 GB limit and are kept in an external-data file, "
                           "which this onnxruntime cannot take from memory; upgrade it (pip install -U "
                           "'onnxruntime>=1.23', or onnxruntime-gpu)")
    names = list(files)
    session_options.add_external_initializers_from_files_in_memory(
        names, [files[n] for n in names], [len(files[n]) for n in names])
