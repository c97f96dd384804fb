"""Content keys of delegated partitions (hybrid_trt/engines/key.py): every component changes the key, nothing
else does, and hashing streams over the weights."""
from __future__ import annotations

import copy
import time
import tracemalloc

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import hybrid_trt
from hybrid_trt.engines import canonical_model_bytes, engine_key, environment


# -- real partitions, lowered by the real pipeline -------------------------------------------------------------
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return (self.fc(y.mean((2, 3))),)


class RenamedBlock(torch.nn.Module):
    """Block with other attribute and variable names: the same computation."""

    def __init__(self):
        super().__init__()
        self.stem_convolution = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.stem_norm = torch.nn.BatchNorm2d(8)
        self.classifier = torch.nn.Linear(8, 4)

    def forward(self, image):
        features = self.stem_norm(self.stem_convolution(image))
        activated = torch.relu(features)
        return (self.classifier(activated.mean((2, 3))),)


def _lower(module: torch.nn.Module, x: torch.Tensor) -> onnx.ModelProto:
    """Capture, partition, extract and lower ``module`` the way the backend does."""
    from torch._functorch.aot_autograd import aot_export_module
    from hybrid_trt.capture import capture_decompositions
    from hybrid_trt.delegates import get_delegate
    from hybrid_trt.partitioner import partition_graph
    from hybrid_trt.partitioner.extract import extract
    from hybrid_trt.lowerings import lower_to_onnx

    module = module.eval()
    with torch.no_grad():
        gm, sig = aot_export_module(module, [x], trace_joint=False, decompositions=capture_decompositions())
    by_name = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    state = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    names = list(sig.inputs_to_parameters.items()) + list(sig.inputs_to_buffers.items())
    constants = {by_name[ph]: state[fqn] for ph, fqn in names}
    plan = partition_graph(gm.graph, [get_delegate("onnxruntime")], min_block_size=3)
    assert len(plan.partitions) == 1, [p.op_count for p in plan.partitions]
    ex = extract(plan.partitions[0], constants)
    return lower_to_onnx(ex.module, [tuple(x.shape)], [x.dtype])


def _key(model, **overrides):
    args = dict(model=model, input_specs=[((1, 3, 8, 8), torch.float32, (192, 64, 8, 1), "cpu")],
                delegate="onnxruntime", delegate_options=_OPTIONS, environment=_ENV)
    args.update(overrides)
    return engine_key(**args)


_OPTIONS = {"provider": "cpu", "precision": "fp32", "num_threads": 2, "workspace_bytes": 1 << 30}
_ENV = {"hybrid_trt": "0.1.0", "torch": "2.6.0", "onnx": "1.17.0", "library": "onnxruntime 1.20.0", "cuda": "12.4",
        "cpu": "x86_64 avx2", "gpu_arch": "sm_90", "gpu": "NVIDIA H200"}


@pytest.fixture(scope="module")
def lowered():
    torch.manual_seed(0)
    block = Block()
    with torch.no_grad():  # non-trivial batch-norm statistics, so they matter to the key
        block.bn.running_mean.uniform_(-1, 1)
        block.bn.running_var.uniform_(0.5, 2)
    x = torch.randn(1, 3, 8, 8)
    return block, x, _lower(block, x)


def test_same_partition_lowered_twice_gives_the_same_key(lowered):
    block, x, model = lowered
    again = copy.deepcopy(block)  # a new module object with the same weights, traced afresh
    assert _key(_lower(again, x)) == _key(model)


def test_renamed_attributes_and_variables_give_the_same_key(lowered):
    block, x, model = lowered
    renamed = RenamedBlock()
    renamed.load_state_dict({k.replace("conv.", "stem_convolution.").replace("bn.", "stem_norm.")
                            .replace("fc.", "classifier."): v for k, v in block.state_dict().items()})
    other = _lower(renamed, x)
    assert _key(other) == _key(model)
    assert canonical_model_bytes(other) == canonical_model_bytes(model)


def test_weights_count_by_content(lowered):
    block, x, model = lowered
    changed = copy.deepcopy(block)
    with torch.no_grad():
        changed.conv.weight[0, 0, 0, 0] += 1e-3
    assert _key(_lower(changed, x)) != _key(model)
    changed = copy.deepcopy(block)
    with torch.no_grad():
        changed.bn.running_var[3] += 1e-3  # a buffer, not a parameter
    assert _key(_lower(changed, x)) != _key(model)


def test_non_semantic_fields_are_ignored(lowered):
    _, _, model = lowered
    decorated = copy.deepcopy(model)
    decorated.doc_string = "exported on Tuesday"
    decorated.producer_name, decorated.producer_version = "someone else", "9.9"
    decorated.model_version, decorated.domain = 7, "ai.example"
    decorated.graph.name, decorated.graph.doc_string = "main_graph", "the graph"
    helper.set_model_props(decorated, {"author": "me"})
    for i, node in enumerate(decorated.graph.node):
        node.name, node.doc_string = f"/renamed/node_{i}", "from line 12"
    # Rename every value consistently, initializers included.
    rename = {n: f"tensor_{i}" for i, n in enumerate(
        [v.name for v in decorated.graph.input] + [t.name for t in decorated.graph.initializer]
        + [o for node in decorated.graph.node for o in node.output])}
    for v in list(decorated.graph.input) + list(decorated.graph.output) + list(decorated.graph.value_info):
        v.name = rename[v.name]
    for t in decorated.graph.initializer:
        t.name = rename[t.name]
    for node in decorated.graph.node:
        node.input[:] = [rename.get(n, n) for n in node.input]
        node.output[:] = [rename[n] for n in node.output]
    assert decorated.SerializeToString() != model.SerializeToString()
    assert canonical_model_bytes(decorated) == canonical_model_bytes(model)
    assert _key(decorated) == _key(model)


def _last_node_to_identity(m):
    last = m.graph.node[-1]
    last.CopyFrom(helper.make_node("Identity", [last.input[0]], list(last.output)))


def _older_opset(m):
    m.opset_import[0].version -= 1


def _double_output(m):
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.DOUBLE


def _swap_two_inputs(m):  # same values, other wiring
    node = next(n for n in m.graph.node if len(n.input) >= 2 and n.input[0] != n.input[1])
    node.input[0], node.input[1] = node.input[1], node.input[0]


def test_semantic_graph_changes_change_the_key(lowered):
    _, _, model = lowered
    keys = set()
    for mutate in (_last_node_to_identity, _older_opset, _double_output, _swap_two_inputs):
        changed = copy.deepcopy(model)
        mutate(changed)
        keys.add(_key(changed))
    assert _key(model) not in keys and len(keys) == 4


def test_each_component_changes_the_key(lowered):
    _, _, model = lowered
    spec = ((1, 3, 8, 8), torch.float32, (192, 64, 8, 1), "cpu")
    variants = {
        "base": {},
        "shape": {"input_specs": [((2, 3, 8, 8), torch.float32, (192, 64, 8, 1), "cpu")]},
        "dtype": {"input_specs": [((1, 3, 8, 8), torch.float16, (192, 64, 8, 1), "cpu")]},
        "strides": {"input_specs": [((1, 3, 8, 8), torch.float32, (192, 1, 24, 3), "cpu")]},
        "device": {"input_specs": [((1, 3, 8, 8), torch.float32, (192, 64, 8, 1), "cuda:0")]},
        "second input": {"input_specs": [spec, spec]},
        "delegate": {"delegate": "tensorrt"},
        "no options": {"delegate_options": {}},
    }
    for name, value in _OPTIONS.items():
        variants[f"option {name}"] = {"delegate_options": {**_OPTIONS, name: f"{value}x"}}
    variants["extra option"] = {"delegate_options": {**_OPTIONS, "timing_cache": True}}
    for name, value in _ENV.items():
        variants[f"environment {name}"] = {"environment": {**_ENV, name: value + ".1"}}
    keys = {}
    for name, overrides in variants.items():
        keys[name] = _key(model, **overrides)
    same = {k: [n for n, v in keys.items() if v == k] for k in keys.values()}
    assert all(len(names) == 1 for names in same.values()), [n for n in same.values() if len(n) > 1]
    # Equal content in another spelling keeps the key: option order, tuple vs list, torch.Size, device objects.
    assert _key(model, delegate_options=dict(reversed(list(_OPTIONS.items())))) == keys["base"]
    assert _key(model, input_specs=[(torch.Size([1, 3, 8, 8]), torch.float32, [192, 64, 8, 1],
                                     torch.device("cpu"))]) == keys["base"]
    assert _key(model, input_specs=[torch.empty(1, 3, 8, 8)]) == keys["base"]  # a tensor as its spec


def test_environment_names_this_machine():
    import onnxruntime
    env = environment("onnxruntime", torch.device("cpu"))
    assert env["hybrid_trt"] == hybrid_trt.__version__
    assert env["torch"] == torch.__version__ and env["onnx"] == onnx.__version__
    # The delegate's own library_version() when it has one (it may add the build's providers), else __version__.
    assert env["library"].startswith(f"onnxruntime {onnxruntime.__version__}")
    assert env["cuda"] == str(torch.version.cuda)
    assert env["gpu_arch"] == "cpu" and env["cpu"]
    assert all(isinstance(v, str) for v in env.values())
    assert environment("onnxruntime", "cpu") == env
    assert environment("tensorrt", "cpu")["library"] != env["library"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_environment_names_the_gpu_architecture():
    major, minor = torch.cuda.get_device_capability(0)
    env = environment("onnxruntime", torch.device("cuda", 0))
    assert env["gpu_arch"] == f"sm_{major}{minor}" and env["gpu"] == torch.cuda.get_device_name(0)
    assert env != environment("onnxruntime", "cpu")


def _big_model(nbytes: int, parts: int) -> onnx.ModelProto:
    n = nbytes // 4 // parts
    weights = [numpy_helper.from_array(np.full(n, i, dtype=np.float32), f"w{i}") for i in range(parts)]
    nodes, last = [], "x"
    for i in range(parts):
        nodes.append(helper.make_node("Add", [last, f"w{i}"], [f"y{i}"]))
        last = f"y{i}"
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, [n])], initializer=weights)
    return helper.make_model(graph)


def test_key_of_a_100mb_model_streams_over_the_weights():
    """The key hashes one initializer at a time: never a serialized copy of the whole model."""
    parts = 4
    model = _big_model(100 << 20, parts)
    _key(model)  # warm-up
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        key = _key(model)
        seconds = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Peak: about one initializer's bytes (protobuf hands raw_data out as a copy), not the 100 MB model.
    assert peak < (100 << 20) / parts * 1.5, f"peak {peak / 2**20:.0f} MiB while hashing a 100 MiB model"
    # Loose: sha256 alone is ~0.3 s per 100 MB; a 2-core machine shared with other work can be several times slower.
    assert seconds < 10, f"keying a 100 MiB model took {seconds:.1f} s"
    model.graph.initializer[parts - 1].raw_data = model.graph.initializer[parts - 1].raw_data[:-4] + b"\0\0\0\0"
    assert _key(model) != key  # the last bytes of the last weight count too


def test_graph_key_follows_hybrid_trt_source(monkeypatch):
    """A changed lowering (same version number, a development tree) must not be served the graph an older lowering
    compiled: the graph key covers hybrid_trt's own source."""
    import torch.fx as fx
    from hybrid_trt import make_options
    from hybrid_trt.engines import graph as graph_mod
    gm = fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()))
    options = make_options(environ={})
    x = [torch.randn(2, 4)]
    before = graph_mod.graph_key(gm, x, {}, options)
    assert graph_mod.graph_key(gm, x, {}, options) == before
    monkeypatch.setattr(graph_mod, "package_source_hash", lambda: "edited lowering")
    assert graph_mod.graph_key(gm, x, {}, options) != before
