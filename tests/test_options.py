"""The options object: validation (unknown keys, bad values), environment variables, immutability, and the
errors the backend raises for arguments it does not take."""
import logging
import dataclasses

import pytest
import torch

import hybrid_trt
from hybrid_trt import Options, make_options, valid_keys
from hybrid_trt.backend import hybrid_trt_backend


def _assert_lists_valid_keys(message):
    for key in valid_keys():
        assert key in message, f"valid key {key!r} not listed in: {message}"


def test_defaults():
    opts = make_options(environ={})
    assert opts == Options()
    assert opts.min_block_size == 3 and opts.strict is False and opts.precision == "fp32"
    assert opts.delegates is None and opts.resolved_delegates() == hybrid_trt.delegates.available_delegates()
    assert "onnxruntime" in opts.resolved_delegates()


def test_unknown_key_names_it_and_lists_valid_keys():
    with pytest.raises(ValueError) as info:
        make_options({"min_blok_size": 2}, environ={})
    assert "min_blok_size" in str(info.value)
    _assert_lists_valid_keys(str(info.value))


@pytest.mark.parametrize("key,value,expected_hint", [
    ("min_block_size", 0, "int >= 1"),
    ("min_block_size", "three", "int >= 1"),
    ("min_block_size", True, "int >= 1"),
    ("min_block_size", 2.5, "int >= 1"),
    ("max_engines_per_partition", -1, "int >= 1"),
    ("num_threads", 0, "int >= 1 or None"),
    ("precision", "int4", "fp32"),
    ("strict", "maybe", "bool"),
    ("print_report", 2, "bool"),
    ("onnxruntime_provider", "rocm", "cpu"),
    ("force_inductor_ops", 5, "aten.convolution"),
    ("delegates", 7, "delegate names"),
])
def test_bad_value_names_key_and_what_is_valid(key, value, expected_hint):
    with pytest.raises(ValueError) as info:
        make_options({key: value}, environ={})
    message = str(info.value)
    assert repr(key) in message and expected_hint in message, message


def test_unknown_delegate_lists_valid_delegates():
    with pytest.raises(ValueError) as info:
        make_options({"delegates": ["nope"]}, environ={})
    message = str(info.value)
    assert "'delegates'" in message and "'nope'" in message
    assert "onnxruntime" in message and "tensorrt" in message


def test_empty_or_duplicate_delegates_raise():
    with pytest.raises(ValueError, match="delegates"):
        make_options({"delegates": []}, environ={})
    with pytest.raises(ValueError, match="'delegates' names \\['onnxruntime'\\] more than once"):
        make_options({"delegates": ["onnxruntime", "onnxruntime"]}, environ={})


def test_an_unavailable_delegate_named_is_left_out_with_one_warning_or_raises_under_strict(caplog):
    """A named delegate whose library is missing (TensorRT on this machine) failed every compile; a fallback never
    fails unless strict=True: graphs compile with the delegates left (Inductor alone here), with the reason."""
    with pytest.raises(ValueError, match="'tensorrt' is not usable here: .*strict=True"):
        make_options({"delegates": ["tensorrt"], "strict": True}, environ={})
    from hybrid_trt.delegates import registry
    registry._warn_once.cache_clear()
    with caplog.at_level(logging.WARNING, logger="hybrid_trt"):
        opts = make_options({"delegates": ["tensorrt", "onnxruntime"]}, environ={})
        assert opts.resolved_delegates() == ("onnxruntime",)
        assert make_options({"delegates": ["tensorrt"]}, environ={}).resolved_delegates() == ()
    warned = [r.getMessage() for r in caplog.records if "'tensorrt' is not usable here" in r.getMessage()]
    assert len(warned) == 2 and "compile with onnxruntime instead" in warned[0], warned
    assert "compile with Inductor alone instead" in warned[1], warned


def test_fp16_with_onnxruntime_named_raises():
    with pytest.raises(ValueError, match="precision.*onnxruntime delegate"):
        make_options({"precision": "fp16", "delegates": ["onnxruntime"]}, environ={})
    with pytest.raises(ValueError, match="precision"):
        make_options(Options(precision="fp16", delegates=("onnxruntime",)))


def test_fp16_by_default_uses_the_delegates_that_build_fp16_and_never_fails_without_them(monkeypatch, caplog):
    from hybrid_trt.delegates import get_delegate
    from hybrid_trt.delegates.registry import _warn_once
    trt = get_delegate("tensorrt")
    monkeypatch.setattr(type(trt), "unavailable_reason", lambda self: None)  # a TensorRT machine
    # Was: ONNX Runtime's check raised, so precision='fp16' failed every compile on the machine it is meant for.
    assert make_options({"precision": "fp16"}, environ={}).resolved_delegates() == ("tensorrt",)
    assert make_options({"precision": "bf16", "delegates": ["tensorrt"]}, environ={}).resolved_delegates() \
        == ("tensorrt",)
    monkeypatch.setattr(type(trt), "unavailable_reason", lambda self: "tensorrt is not installed")
    _warn_once.cache_clear()
    with caplog.at_level(logging.WARNING, logger="hybrid_trt"):
        for _ in range(2):
            assert make_options({"precision": "fp16"}, environ={}).resolved_delegates() == ()
    warned = [r.getMessage() for r in caplog.records if "precision" in r.getMessage()]
    assert len(warned) == 1 and "only tensorrt builds fp16" in warned[0] and "Inductor alone" in warned[0], warned
    with pytest.raises(ValueError, match="only tensorrt builds fp16.*strict=True"):
        make_options({"precision": "fp16", "strict": True}, environ={})


def test_a_provider_the_onnxruntime_build_lacks_leaves_it_out_with_one_warning(caplog):
    import onnxruntime
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has the CUDA provider")
    from hybrid_trt.delegates.registry import _warn_once
    _warn_once.cache_clear()
    # Was a ValueError from option parsing: every compile failed, against "a fallback never fails".
    with caplog.at_level(logging.WARNING, logger="hybrid_trt"):
        for named in ({}, {"delegates": ["onnxruntime"]}):
            opts = make_options({"onnxruntime_provider": "cuda", **named}, environ={})
            assert opts.resolved_delegates() == ()
    warned = [r.getMessage() for r in caplog.records if "onnxruntime_provider" in r.getMessage()]
    assert len(warned) == 1 and "CUDAExecutionProvider" in warned[0] and "onnxruntime-gpu" in warned[0], warned
    with pytest.raises(ValueError, match="CUDAExecutionProvider.*strict=True"):
        make_options({"onnxruntime_provider": "cuda", "strict": True}, environ={})
    if "TensorrtExecutionProvider" not in onnxruntime.get_available_providers():  # what that provider needs
        with pytest.raises(ValueError, match="TensorrtExecutionProvider needs onnxruntime-gpu and NVIDIA's TensorRT"):
            make_options({"onnxruntime_provider": "tensorrt", "strict": True}, environ={})


def test_values_are_normalised():
    opts = make_options({"delegates": ["onnxruntime"], "force_inductor_ops": ["aten.convolution"],
                         "min_block_size": "2", "strict": "yes", "num_threads": None}, environ={})
    assert opts.delegates == ("onnxruntime",)
    assert opts.force_inductor_ops == frozenset({"aten.convolution"})
    assert opts.min_block_size == 2 and opts.strict is True and opts.num_threads is None
    # 0 and 1 read as bools, as their strings "0" and "1" (the environment's spelling) are; other ints are not
    opts = make_options({"strict": 1, "cache": 0}, environ={})
    assert opts.strict is True and opts.cache is False


def test_environment_variables():
    env = {"HYBRID_TRT_MIN_BLOCK_SIZE": "5", "HYBRID_TRT_STRICT": "true", "HYBRID_TRT_DELEGATES": "onnxruntime",
           "HYBRID_TRT_FORCE_INDUCTOR_OPS": "aten.convolution, aten.relu", "HYBRID_TRT_NUM_THREADS": "none",
           "HYBRID_TRT_MAX_ENGINES_PER_PARTITION": "4", "UNRELATED": "x"}
    opts = make_options(environ=env)
    assert opts.min_block_size == 5 and opts.strict is True and opts.delegates == ("onnxruntime",)
    assert opts.force_inductor_ops == frozenset({"aten.convolution", "aten.relu"})
    assert opts.num_threads is None and opts.max_engines_per_partition == 4
    # Explicit options win over the environment.
    assert make_options({"min_block_size": 2}, environ=env).min_block_size == 2


def test_environment_read_from_os_environ(monkeypatch):
    monkeypatch.setenv("HYBRID_TRT_MIN_BLOCK_SIZE", "7")
    assert make_options().min_block_size == 7


def test_bad_environment_value_names_key():
    with pytest.raises(ValueError, match="'min_block_size'"):
        make_options(environ={"HYBRID_TRT_MIN_BLOCK_SIZE": "zero"})


def test_an_options_object_is_taken_as_it_is_but_the_environment_is_still_checked():
    opts = Options(min_block_size=5)
    assert make_options(opts, environ={"HYBRID_TRT_MIN_BLOCK_SIZE": "7"}) is opts  # checked, not applied
    for bad in ({"HYBRID_TRT_MIN_BLOCKSIZE": "3"}, {"HYBRID_TRT_NUM_THREADS": "abc"}):
        with pytest.raises(ValueError, match="HYBRID_TRT_MIN_BLOCKSIZE|'num_threads'"):
            make_options(opts, environ=bad, resolve=False)


def test_unknown_environment_variable_raises():
    with pytest.raises(ValueError) as info:
        make_options(environ={"HYBRID_TRT_MIN_BLOCKSIZE": "3"})
    message = str(info.value)
    assert "HYBRID_TRT_MIN_BLOCKSIZE" in message and "HYBRID_TRT_MIN_BLOCK_SIZE" in message


def test_options_are_immutable():
    opts = make_options({"force_inductor_ops": ["aten.relu"]}, environ={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.min_block_size = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.strict = True
    assert isinstance(opts.force_inductor_ops, frozenset)
    hash(opts)  # usable as a cache key


def test_options_object_is_validated_too():
    assert Options(min_block_size="4").min_block_size == 4
    with pytest.raises(ValueError, match="'min_block_size'"):
        Options(min_block_size=0)
    with pytest.raises(ValueError, match="'delegates'"):
        Options(delegates=("nope",))
    with pytest.raises(ValueError, match="precision"):
        make_options(Options(precision="fp16", delegates=("onnxruntime",)))
    opts = Options(min_block_size=2)
    assert make_options(opts) is opts


def test_non_mapping_options_raise():
    with pytest.raises(ValueError, match="dict"):
        make_options([("min_block_size", 2)], environ={})


def test_backend_rejects_an_unknown_mode():
    gm = torch.fx.symbolic_trace(torch.nn.ReLU())
    with pytest.raises(ValueError, match="mode='turbo'"):
        hybrid_trt_backend(gm, [torch.randn(2)], mode="turbo")


def test_torch_compile_with_an_unknown_mode_raises():
    compiled = torch.compile(torch.nn.ReLU(), backend="hybrid_trt", mode="turbo")
    with pytest.raises(Exception) as info:
        compiled(torch.randn(3))
    chain, e = [], info.value
    while e is not None:
        chain.append(e)
        e = e.__cause__ or e.__context__
    assert any(isinstance(x, ValueError) and "mode" in str(x) for x in chain), repr(info.value)


def test_torch_compile_with_bad_options_raises():
    compiled = torch.compile(torch.nn.ReLU(), backend="hybrid_trt", options={"delegates": ["nope"]})
    with pytest.raises(Exception, match="nope"):
        compiled(torch.randn(3))


def test_environment_configures_the_backend(monkeypatch, capsys):
    monkeypatch.setenv("HYBRID_TRT_MIN_BLOCK_SIZE", "50")
    monkeypatch.setenv("HYBRID_TRT_PRINT_REPORT", "1")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        out = torch.compile(model, backend="hybrid_trt")(x)
        torch.testing.assert_close(out, model(x))
    report = hybrid_trt.last_report()
    assert report.partitions == [] and all("min_block_size=50" in op.reason for op in report.inductor_ops)
    assert "min_block_size=50" in capsys.readouterr().out  # the printed report


def test_plugin_variables_are_not_backend_options():
    # The sparse plugin reads its two variables itself; the backend must not reject them as unknown options, and
    # a misspelt one is not let through as if it were the plugin's.
    opts = make_options({}, environ={"HYBRID_TRT_SPARSE_AUTOTUNE": "0", "HYBRID_TRT_SPARSE_TORCH_ONLY": "1",
                                     "HYBRID_TRT_MIN_BLOCK_SIZE": "4"})
    assert opts.min_block_size == 4
    for typo in ("HYBRID_TRT_SPARSEAUTOTUNE", "HYBRID_TRT_SPARSE_AUTOTUNES", "HYBRID_TRT_SPARSE_TORCHONLY"):
        with pytest.raises(ValueError, match=f"{typo} is not a hybrid_trt option.*HYBRID_TRT_SPARSE_AUTOTUNE"):
            make_options({}, environ={typo: "0"})


@pytest.mark.parametrize("value,expected", [(None, True), ("", True), ("0", False), ("off", False), ("No", False),
                                            ("1", True), ("true", True), (" ON ", True)])
def test_plugin_flags_take_the_options_spellings(value, expected):
    from hybrid_trt.options import env_flag
    environ = {} if value is None else {"HYBRID_TRT_SPARSE_AUTOTUNE": value}
    assert env_flag("HYBRID_TRT_SPARSE_AUTOTUNE", True, environ) is expected


def test_a_plugin_flag_it_cannot_read_is_an_error_not_false():
    # "true" used to read as false (only "1" counted), and an unknown spelling was silently off.
    import subprocess
    import sys
    code = "import hybrid_trt.plugins.sparse.ops as ops; print(ops._FORCE_TORCH)"
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("HYBRID_TRT_")}
    on = subprocess.run([sys.executable, "-c", code], env={**env, "HYBRID_TRT_SPARSE_TORCH_ONLY": "true"},
                        capture_output=True, text=True, timeout=300)
    assert on.returncode == 0 and on.stdout.strip() == "True", on.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-c", code], env={**env, "HYBRID_TRT_SPARSE_TORCH_ONLY": "maybe"},
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0
    assert "HYBRID_TRT_SPARSE_TORCH_ONLY='maybe' is not a boolean" in bad.stderr, bad.stderr[-2000:]


def test_cache_options_and_their_environment_variables(tmp_path, monkeypatch):
    from hybrid_trt.engines.runtime import engine_store
    opts = make_options(environ={})
    assert opts.cache is True and opts.cache_dir is None and opts.cache_max_bytes == 10 << 30
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert engine_store(opts).root == tmp_path / "xdg" / "hybrid_trt"  # the default follows XDG
    env = {"HYBRID_TRT_CACHE": "0", "HYBRID_TRT_CACHE_DIR": str(tmp_path / "c"), "HYBRID_TRT_CACHE_MAX_BYTES": "1000"}
    opts = make_options(environ=env)
    assert (opts.cache, opts.cache_dir, opts.cache_max_bytes) == (False, str(tmp_path / "c"), 1000)
    assert engine_store(opts).root is None  # cache=False: nothing touches disk
    on = make_options({"cache": True}, environ=env)
    assert engine_store(on).root == tmp_path / "c" and engine_store(on).max_bytes == 1000
    with pytest.raises(ValueError, match="cache_max_bytes"):
        make_options({"cache_max_bytes": 0}, environ={})
    with pytest.raises(ValueError, match="cache_dir"):
        make_options({"cache_dir": 3}, environ={})
    # Blanks around a directory from the environment are a typo: "   " was a directory named three spaces.
    assert make_options(environ={"HYBRID_TRT_CACHE_DIR": "   "}).cache_dir is None
    assert make_options(environ={"HYBRID_TRT_CACHE_DIR": f" {tmp_path / 'c'} "}).cache_dir == str(tmp_path / "c")


def test_only_compiled_fields_enter_the_cache_tag():
    base = make_options(environ={}).compiled_fields()
    assert make_options({"print_report": True, "cache_dir": "/x", "cache_max_bytes": 5}, environ={}) \
        .compiled_fields() == base
    assert make_options({"min_block_size": 5}, environ={}).compiled_fields() != base


def test_cache_off_compiles_without_touching_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("HYBRID_TRT_CACHE_DIR", str(tmp_path / "store"))
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2), torch.nn.Sigmoid())
    x = torch.randn(3, 4)
    with torch.no_grad():
        out = torch.compile(model.eval(), backend="hybrid_trt", options={"cache": False})(x)
        torch.testing.assert_close(out, model(x))
    report = hybrid_trt.last_report()
    assert report.partitions and [e.source for e in report.partitions[0].engines] == ["built"]
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("spelling", ["aten.convolution", "aten::convolution", "torch.ops.aten.convolution",
                                      "convolution", "aten.convolution.default"])
def test_force_inductor_ops_takes_torchs_spellings(spelling):
    """Each spelling keeps the convolution with Inductor ("aten::op" and "torch.ops.aten.op" were accepted and
    matched nothing)."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3)

        def forward(self, x):
            return self.conv(x).relu().sigmoid() * 2

    compiled = torch.compile(Net().eval(), backend="hybrid_trt", options={"force_inductor_ops": [spelling]})
    with torch.no_grad():
        compiled(torch.randn(1, 3, 8, 8))
    report = hybrid_trt.last_report()
    assert [op.reason for op in report.inductor_ops if op.op == "aten.convolution.default"] == \
        ["forced to Inductor by option force_inductor_ops"], report.table()


def test_force_inductor_ops_objects_are_taken_by_name():
    ops = make_options({"force_inductor_ops": [torch.ops.aten.convolution.default, torch.ops.aten.add]})
    assert ops.force_inductor_ops == frozenset({"aten.convolution.default", "aten.add"})


@pytest.mark.parametrize("name,problem", [("aten.convolutoin", "names no registered op"),
                                          ("aten.add.Tensr", "names no overload of aten.add"),
                                          ("aten.add.Tensor.x", "is not an op name"),
                                          ("nosuchlib.op", "names no registered op"),
                                          ("convolutoin", "names no registered op in any namespace")])
def test_force_inductor_ops_names_an_op_that_does_not_exist(name, problem):
    """A typo kept nothing with Inductor, silently; now it is a ValueError naming the option and the name."""
    with pytest.raises(ValueError, match=rf"'force_inductor_ops': '{name}' {problem}"):
        make_options({"force_inductor_ops": [name]})


@pytest.mark.parametrize("name,problem", [
    ("conv2d", "is decomposed by torch while the graph is captured.*it becomes aten.convolution: name that"),
    ("aten.linear", "is decomposed by torch.*it becomes aten.addmm or aten.mm"),
    ("batch_norm", "is decomposed by torch"), ("aten.relu_", "is an in-place op.*hold aten.relu instead"),
    ("aten.add.out", "writes to its arguments")])
def test_force_inductor_ops_refuses_an_op_no_captured_graph_holds(name, problem):
    """``["conv2d", "linear", "batch_norm", "relu_"]`` was accepted and kept nothing with Inductor, silently: torch
    decomposes those ops (and functionalizes in-place ones) before the partitioner sees the graph."""
    with pytest.raises(ValueError, match=rf"'force_inductor_ops': '{name}' {problem}"):
        make_options({"force_inductor_ops": [name]})


def test_force_inductor_ops_takes_the_aten_names_of_ops_kept_whole():
    """Attention and interpolation reach the partitioner as hybrid_trt's own ops; the ATen names users know them by
    keep them with Inductor (and a bilinear resize is not a nearest one)."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(8, 24)

        def forward(self, x):  # x: (1, 8, 4, 4); q, k, v: (batch, heads, tokens, channels), as a fused kernel takes
            q, k, v = self.qkv(x.flatten(2).transpose(1, 2)).view(1, 16, 3, 1, 8).permute(2, 0, 3, 1, 4).unbind(0)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v).squeeze(1).transpose(1, 2).reshape(x.shape)
            up = torch.nn.functional.interpolate(a, scale_factor=2.0, mode="bilinear")
            return up.relu() + torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest").sigmoid()

    x = torch.randn(1, 8, 4, 4)
    for forced, kept in ((["aten.scaled_dot_product_attention"], ["hybrid_trt.attention.default"]),
                         (["upsample_bilinear2d"], ["hybrid_trt.interpolate.default"])):
        torch._dynamo.reset()
        model = Net().eval()
        compiled = torch.compile(model, backend="hybrid_trt", options={"force_inductor_ops": forced,
                                                                      "min_block_size": 1})
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        report = hybrid_trt.last_report()
        assert [op.op for op in report.inductor_ops if "force_inductor_ops" in op.reason] == kept, report.table()
        delegated = [o for p in report.partitions for o in p.ops]
        assert "hybrid_trt.interpolate.default" in delegated, report.table()  # the nearest resize, at least


def test_force_inductor_ops_takes_a_custom_ops_bare_name():
    """The README says a bare name keeps that op in any namespace, and matching does; the check looked the name up
    in aten alone, so a custom op's bare name was refused."""
    torch.library.define("htrt_options_test::decode_bare", "(Tensor x) -> Tensor")
    assert make_options({"force_inductor_ops": ["decode_bare"]}).force_inductor_ops == frozenset({"decode_bare"})


def test_a_bad_value_from_the_environment_names_the_variable(monkeypatch):
    """It was reported under the option's name alone ("option 'cache_max_bytes': invalid value '10GiB'"), which
    does not say the value came from the environment, where it has to be fixed."""
    monkeypatch.setenv("HYBRID_TRT_CACHE_MAX_BYTES", "10GiB")
    with pytest.raises(ValueError, match=r"environment variable HYBRID_TRT_CACHE_MAX_BYTES='10GiB': .*"
                                         r"'cache_max_bytes': invalid value"):
        make_options({})
    assert make_options({"cache_max_bytes": 5}).cache_max_bytes == 5  # the dict wins, and its value is not the env's
