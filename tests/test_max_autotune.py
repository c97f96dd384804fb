"""torch.compile(..., mode="max-autotune") and "max-autotune-no-cudagraphs" (option ``max_autotune``): Inductor
autotunes every compile hybrid_trt starts for it (engines are unchanged); "max-autotune" also asks for CUDA graphs.
They were refused with a ValueError, which failed the compile of users who write torch's commonest mode."""
from __future__ import annotations

import torch

import hybrid_trt
from _helpers import assert_close


class _Atan2Head(torch.nn.Module):
    """Linear layers (delegated) around atan2 (no lowering: Inductor compiles it)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.b(torch.atan2(self.a(x).relu(), x + 1)).relu()


def _spy_inner_compile(monkeypatch) -> list:
    """The (max_autotune, coordinate_descent_tuning) settings Inductor's inner compile ran under, per compile."""
    import torch._inductor.config as config
    from hybrid_trt import backend
    seen, inner = [], backend.compile_fx_inner

    def spy(*args, **kwargs):
        seen.append((config.max_autotune, config.coordinate_descent_tuning))
        return inner(*args, **kwargs)
    monkeypatch.setattr(backend, "compile_fx_inner", spy)
    return seen


def test_max_autotune_mode_compiles_inductors_part_autotuned_and_matches_eager(monkeypatch):
    import torch._inductor.config as config
    seen = _spy_inner_compile(monkeypatch)
    model, x = _Atan2Head().eval(), torch.randn(8, 16)
    with torch.no_grad():
        got = torch.compile(model, backend="hybrid_trt", mode="max-autotune-no-cudagraphs",
                            dynamic=False)(x)
    assert_close(got, model(x))
    report = hybrid_trt.last_report()
    assert report.delegated_op_count > 0 and report.reasons(), report.table()  # both sides ran
    assert seen and all(s == (True, True) for s in seen), seen
    assert config.max_autotune is False  # scoped to hybrid_trt's compile


def test_without_the_mode_inductor_is_not_autotuned(monkeypatch):
    seen = _spy_inner_compile(monkeypatch)
    model, x = _Atan2Head().eval(), torch.randn(8, 16)
    with torch.no_grad():
        torch.compile(model, backend="hybrid_trt", dynamic=False)(x)
    assert seen and all(s == (False, False) for s in seen), seen


def test_a_partitions_fallback_compiled_at_run_time_is_autotuned_too(monkeypatch):
    # Past max_engines_per_partition a new shape runs through the partition's Inductor fallback, compiled then.
    import torch._inductor.compile_fx as compile_fx_module
    patches, compile_fx = [], compile_fx_module.compile_fx

    def spy(gm, example_inputs, *args, **kwargs):
        patches.append(dict(kwargs.get("config_patches") or {}))
        return compile_fx(gm, example_inputs, *args, **kwargs)
    monkeypatch.setattr(compile_fx_module, "compile_fx", spy)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    compiled = torch.compile(model, backend="hybrid_trt", dynamic=True,
                             options={"max_autotune": True, "max_engines_per_partition": 1, "min_block_size": 1})
    with torch.no_grad():
        for batch in (3, 5):
            x = torch.randn(batch, 16)
            assert_close(compiled(x), model(x))
    fallbacks = [p for p in patches if p.get("max_autotune")]
    assert fallbacks and all(p.get("coordinate_descent_tuning") for p in fallbacks), patches


def test_export_hands_the_setting_to_aotinductor(monkeypatch, tmp_path):
    aoti, configs = torch._inductor.aoti_compile_and_package, []

    def spy(program, *args, **kwargs):
        configs.append(dict(kwargs.get("inductor_configs") or {}))
        return aoti(program, *args, **kwargs)
    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", spy)
    model, x = _Atan2Head().eval(), torch.randn(8, 16)
    loaded = hybrid_trt.load(hybrid_trt.export(model, (x,), path=tmp_path / "pkg", options={"max_autotune": True}))
    with torch.no_grad():
        assert_close(loaded(x), model(x))
    assert configs and configs[-1].get("max_autotune") is True, configs
