"""hybrid_trt/inductor_fixes.py: Inductor passes defective on some torch releases are switched off while
hybrid_trt compiles, detected from the pass's source; elsewhere nothing changes."""
import torch
from torch._inductor import config
from torch._inductor.fx_passes import joint_graph, pad_mm

import hybrid_trt  # noqa: F401 - registers the backend
from hybrid_trt import inductor_fixes


def test_a_pass_without_its_fix_is_switched_off_for_the_block_only(monkeypatch):
    def scatter_upon_const_tensor(match, shape, background_val, dtype, dim, selector, val):  # torch 2.11's form
        return torch.where(selector, val, background_val)

    monkeypatch.setattr(joint_graph, "scatter_upon_const_tensor", scatter_upon_const_tensor)
    inductor_fixes.defective_settings.cache_clear()
    try:
        assert inductor_fixes.defective_settings(False).get("optimize_scatter_upon_const_tensor") is False
        before = config.optimize_scatter_upon_const_tensor
        with inductor_fixes.inductor_defects_avoided(False):
            assert config.optimize_scatter_upon_const_tensor is False
        assert config.optimize_scatter_upon_const_tensor == before
    finally:
        inductor_fixes.defective_settings.cache_clear()


def test_matmul_padding_stays_on_for_static_graphs(monkeypatch):
    """Its defect needs symbolic sizes: a static graph keeps the pass (it pads GPU matmuls for speed)."""
    monkeypatch.setattr(pad_mm, "_should_pad", len)  # unreadable: counted as defective
    inductor_fixes.defective_settings.cache_clear()
    try:
        assert "shape_padding" not in inductor_fixes.defective_settings(False)
        assert inductor_fixes.defective_settings(True)["shape_padding"] is False
    finally:
        inductor_fixes.defective_settings.cache_clear()
    seen = []

    def backend(gm, example_inputs):  # what hybrid_trt's backend is given
        seen.append(inductor_fixes.has_symbolic_sizes(example_inputs))
        return gm.forward

    for dynamic in (False, True):
        torch._dynamo.reset()
        torch.compile(lambda x: x * 2, backend=backend, dynamic=dynamic)(torch.randn(4, 3))
    assert seen == [False, True]


def test_unreadable_source_counts_as_defective_and_a_missing_pass_does_not(monkeypatch):
    monkeypatch.setattr(pad_mm, "_should_pad", len)  # a builtin: inspect cannot read its source
    assert inductor_fixes._source_lacks("pad_mm", "_should_pad", "optimization_hint")
    assert not inductor_fixes._source_lacks("pad_mm", "no_such_pass", "anything")


def test_this_torch_fixed_passes_are_left_on():
    """The torch this suite runs on (2.14 on the CPU machine) has both fixes: nothing is switched off there, and
    a compile leaves Inductor's settings as they were."""
    inductor_fixes.defective_settings.cache_clear()
    fixed = [name for name, marker, fn in (("joint_graph", ".to(dtype)", "scatter_upon_const_tensor"),
                                            ("pad_mm", "optimization_hint", "_should_pad"))
             if not inductor_fixes._source_lacks(name, fn, marker)]
    patch = inductor_fixes.defective_settings(True)
    assert ("optimize_scatter_upon_const_tensor" in patch) == ("joint_graph" not in fixed)
    assert ("shape_padding" in patch) == ("pad_mm" not in fixed)
    before = (config.optimize_scatter_upon_const_tensor, config.shape_padding)
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(torch.nn.Linear(3, 2).eval(), backend="hybrid_trt")(torch.randn(2, 3))
    assert (config.optimize_scatter_upon_const_tensor, config.shape_padding) == before


def test_float16_one_hot_keeps_its_dtype_through_the_backend():
    """The graph torch 2.11's rewrite broke (a one-hot written by scatter into zeros): the compiled output keeps
    float16. On the CPU float16 goes to Inductor; on torch 2.11 this failed wherever the rewrite ran."""
    def one_hot(cls):
        return torch.zeros(cls.shape[0], 5, dtype=torch.float16).scatter(1, cls[:, None], 1.0)

    torch._dynamo.reset()
    cls = torch.tensor([0, 3, 4, 1])
    got = torch.compile(one_hot, backend="hybrid_trt")(cls)
    assert got.dtype == torch.float16 and torch.equal(got, one_hot(cls))
