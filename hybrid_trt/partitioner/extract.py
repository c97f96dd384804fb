"""Cut one partition out of the main graph as a self-contained GraphModule.

Signature of the result: ``forward(*tensor_inputs, *size_inputs) -> tuple(outputs)``; parameters and buffers
the partition reads are attributes (``get_attr``), so a delegate can bake them in as constants.
"""
from __future__ import annotations

import dataclasses

import torch
import torch.fx as fx

from .partition import Partition


@dataclasses.dataclass
class ExtractedPartition:
    module: fx.GraphModule
    tensor_inputs: list[fx.Node]  # nodes of the main graph feeding the tensor placeholders, in order
    size_inputs: list[fx.Node]  # nodes of the main graph feeding the size placeholders, in order
    outputs: list[fx.Node]  # nodes of the main graph this partition's outputs replace, in order
    constant_names: list[str]


def extract(partition: Partition, constants: dict[fx.Node, torch.Tensor]) -> ExtractedPartition:
    graph = fx.Graph()
    root = torch.nn.Module()
    env: dict[fx.Node, fx.Node] = {}
    tensor_inputs, size_inputs, constant_nodes = [], [], []
    for inp in partition.inputs:
        if inp in constants:
            constant_nodes.append(inp)
        elif isinstance(inp.meta.get("val"), torch.Tensor):
            tensor_inputs.append(inp)
        else:
            size_inputs.append(inp)
    for i, inp in enumerate(tensor_inputs):
        env[inp] = graph.placeholder(f"input_{i}")
        env[inp].meta["val"] = inp.meta.get("val")
    for i, inp in enumerate(size_inputs):
        env[inp] = graph.placeholder(f"size_{i}")
        env[inp].meta["val"] = inp.meta.get("val")
    names = []
    for i, inp in enumerate(constant_nodes):
        name = f"const_{i}"
        root.register_buffer(name, constants[inp], persistent=False)
        env[inp] = graph.get_attr(name)
        env[inp].meta["val"] = inp.meta.get("val")
        names.append(name)
    for node in partition.nodes:
        env[node] = graph.node_copy(node, env.__getitem__)
    graph.output(tuple(env[o] for o in partition.outputs))
    module = fx.GraphModule(root, graph, class_name="DelegatedPartition")
    return ExtractedPartition(module, tensor_inputs, size_inputs, list(partition.outputs), names)
