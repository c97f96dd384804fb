"""A loaded package in CUDA graphs: ``hybrid_trt.load(path, cuda_graphs=True)``.

Export decides whether the package's graph can be replayed whole (the engines' capture probe, the graph's
blockers) and keeps the reasons in the manifest; load wraps the AOTInductor call in the whole runner
(whole_graph.py) where there are none. CPU parts run everywhere: the recorded verdict, the warning and the record
where a package runs uncaptured, and the whole path from a real CPU package through the runner with its capture
replaced by a stand-in. The CUDA parts need a GPU with onnxruntime-gpu: replays that run no Python delegate code,
new inputs, a shape change, two packages alternating, a user stream, outputs kept across calls, fp16.
"""
import json
import logging

import pytest
import torch

import hybrid_trt
from hybrid_trt import cudagraphs
from hybrid_trt.export import deploy

from _helpers import assert_close
from test_cuda_graphs import _check, _count_runs, _cuda_model, _tol, cuda_only
from test_whole_graph import calls_on_a_user_stream, replays_run_no_python_delegate_code

CPU_REASON = "the package runs on the CPU (CUDA graphs capture CUDA work only)"


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 4, 3, padding=1)).eval()


@pytest.fixture(scope="module")
def cpu_package(tmp_path_factory):
    model = _model()
    path = hybrid_trt.export(model, (torch.randn(1, 3, 16, 16),), path=tmp_path_factory.mktemp("cg") / "p.pkg")
    return model, path


@pytest.fixture(scope="module")
def cleared_package(cpu_package, tmp_path_factory):
    """The same model exported with its manifest clearing it for capture (as a capturable CUDA package's does),
    for the runner's path on the CPU with the stand-in capture."""
    model, _ = cpu_package
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cudagraphs, "package_reasons", lambda *a: [])
        path = hybrid_trt.export(model, (torch.randn(1, 3, 16, 16),), path=tmp_path_factory.mktemp("cg") / "c.pkg")
    return model, path


def test_export_records_the_verdict_and_a_cpu_package_runs_uncaptured_with_one_warning(cpu_package, hybrid_logs):
    model, path = cpu_package
    plain = hybrid_trt.load(path)
    assert plain.cuda_graphs is None and plain.manifest["cuda_graphs"] == {"reasons": [CPU_REASON],
                                                                     "placed_for_replay": False}
    loaded = hybrid_trt.load(path, cuda_graphs=True)
    assert loaded.cuda_graphs.status == "not captured" and loaded.cuda_graphs.reasons == [CPU_REASON]
    warned = [r.getMessage() for r in hybrid_logs.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "runs without CUDA graphs" in warned[0] and CPU_REASON in warned[0], warned
    with torch.no_grad():
        for k in range(3):
            x = torch.randn(1, 3, 16, 16)
            assert_close(loaded(x), model(x), 1e-5, 1e-5, what=f"call {k}")


def test_a_package_without_a_recorded_verdict_runs_uncaptured_and_says_to_export_again(hybrid_logs):
    run = object()
    for manifest in ({}, {"cuda_graphs": {}}, {"cuda_graphs": {"reasons": "yes"}}):
        got, record = deploy._replayed(run, manifest, "old.pkg")
        assert got is run and record.status == "not captured"
        assert "does not say whether its graph can be captured" in record.reasons[0] and "export it again" in \
            record.reasons[0]


def test_a_capturable_package_replays_through_the_runner(cleared_package, stand_in_capture, monkeypatch):
    """The load path end to end on a real (CPU) package whose manifest clears it, the capture a stand-in: the
    package's call is warmed up, captured at its second call and replayed after; every output is the caller's
    own tensor and matches eager; the loader runs single-threaded (torch's setting for CUDA graphs)."""
    model, path = cleared_package
    assert hybrid_trt.load(path).manifest["cuda_graphs"] == {"reasons": [], "placed_for_replay": False}
    threaded = []
    load_aoti = deploy._load_aoti
    monkeypatch.setattr(deploy, "_load_aoti", lambda *a, **k: threaded.append(k) or load_aoti(*a, **k))
    loaded = hybrid_trt.load(path, cuda_graphs=True)
    assert threaded == [{"single_threaded": True}]
    assert loaded.cuda_graphs.status.startswith("captured whole") and loaded.cuda_graphs.reasons == []
    outs = []
    with torch.no_grad():
        for k in range(5):
            x = torch.randn(1, 3, 16, 16)
            out = loaded(x)
            assert_close(out, model(x), 1e-5, 1e-5, what=f"call {k}")
            outs.append((out, model(x)))
    # warm-up; capture (and its replay); 3 replays
    assert len(stand_in_capture) == 1 and stand_in_capture[0].replays == 1 + 3
    for k, (out, expected) in enumerate(outs):  # kept across calls: never overwritten by a later one
        assert_close(out, expected, 1e-5, 1e-5, what=f"kept output {k}")


# ---------------------------------------------------------------------------------------------- CUDA


def _exported(model, example, tmp_path, name, **kwargs):
    """Every supported partition delegated (placement "auto" may keep a small model with Inductor on a GPU): the
    graphs must hold engine runs."""
    return hybrid_trt.export(model, example, path=tmp_path / name, options={"placement": "delegate"}, **kwargs)


@cuda_only
def test_replays_run_no_python_delegate_code_and_compute_on_new_inputs(monkeypatch, tmp_path, no_tf32):
    model, x = _cuda_model()
    path = _exported(model, (x,), tmp_path, "resnet.pkg")
    calls = _count_runs(monkeypatch)
    loaded = hybrid_trt.load(path, cuda_graphs=True)
    assert loaded.manifest["cuda_graphs"]["reasons"] == [], loaded.manifest["cuda_graphs"]
    with torch.no_grad():
        loaded(x)
        replays_run_no_python_delegate_code(loaded, model, x, calls)
    assert loaded.cuda_graphs.status.startswith("captured whole"), loaded.cuda_graphs


@cuda_only
def test_a_dynamic_package_captures_each_shape(tmp_path, no_tf32):
    model, x = _cuda_model(batch=2)
    batch = torch.export.Dim("batch", min=1, max=4)
    path = _exported(model, (x,), tmp_path, "dynamic.pkg", dynamic_shapes=({0: batch},),
                     shapes=[{"x": (2, 3, 64, 64)}, {"x": (4, 3, 64, 64)}])
    loaded = hybrid_trt.load(path, cuda_graphs=True)
    with torch.no_grad():
        for b in (2, 4, 2, 4, 2, 4):
            xi = torch.randn(b, 3, 64, 64, device="cuda")
            assert_close(loaded(xi), model(xi), *_tol(torch.float32), what=f"batch {b}")
    assert loaded.cuda_graphs.status.startswith("captured whole"), loaded.cuda_graphs


@cuda_only
def test_two_packages_alternating_and_outputs_kept_across_calls(tmp_path, no_tf32):
    a, xa = _cuda_model("resnet18")
    b, xb = _cuda_model("detector")
    la = hybrid_trt.load(_exported(a, (xa,), tmp_path, "a.pkg"), cuda_graphs=True)
    lb = hybrid_trt.load(_exported(b, (xb,), tmp_path, "b.pkg"), cuda_graphs=True)
    kept = []
    with torch.no_grad():
        for step in range(5):
            xa_i, xb_i = xa + step, xb * (1 + 0.1 * step)
            ya, yb = la(xa_i), lb(xb_i)
            kept.append((ya, a(xa_i)))
            _check("detector", yb, b(xb_i), torch.float32, f"package b, step {step}")
    for step, (got, expected) in enumerate(kept):  # no clone needed: each call's outputs are its own
        _check("resnet18", got, expected, torch.float32, f"package a, kept output of step {step}")
    for loaded in (la, lb):
        assert loaded.cuda_graphs.status.startswith("captured whole"), loaded.cuda_graphs


@cuda_only
def test_user_stream(tmp_path, no_tf32):
    model, x = _cuda_model()
    loaded = hybrid_trt.load(_exported(model, (x,), tmp_path, "s.pkg"), cuda_graphs=True)
    with torch.no_grad():
        calls_on_a_user_stream(loaded, model, x)


@cuda_only
def test_fp16_package_matches_eager(tmp_path):
    model, x = _cuda_model("resnet18", torch.float16)
    loaded = hybrid_trt.load(_exported(model, (x,), tmp_path, "h.pkg", rtol=2e-2, atol=2e-2), cuda_graphs=True)
    with torch.no_grad():
        for step in range(4):
            xi = x * (1 + 0.05 * step)
            assert_close(loaded(xi), model(xi), *_tol(torch.float16), what=f"fp16 call {step}")
    assert loaded.cuda_graphs.status.startswith("captured whole"), loaded.cuda_graphs


def test_the_package_is_called_through_its_loaders_boxed_run(cpu_package, monkeypatch):
    """AOTICompiledModel's call re-flattens arguments and outputs by their treespecs at every call; a package's
    are flat, so the loader's boxed_run is called directly (and the model's own call where that cannot be)."""
    model, path = cpu_package
    loaded = hybrid_trt.load(path)
    boxed, real = [], loaded._aoti.loader

    class Loader:  # the real loader, its boxed_run counted
        def __getattr__(self, name):
            return getattr(real, name)

        def boxed_run(self, inputs):
            boxed.append(len(inputs))
            return real.boxed_run(inputs)
    monkeypatch.setattr(loaded._aoti, "loader", Loader())
    call = deploy._flat_call(loaded._aoti)
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        assert_close(call(x)[0], model(x), 1e-5, 1e-5, what="boxed_run")
    assert boxed == [1]
    no_loader = object()
    assert deploy._flat_call(no_loader) is no_loader


def test_inspect_says_and_bench_loads_with_cuda_graphs(cpu_package, capsys):
    from hybrid_trt.export import cli
    _, path = cpu_package
    assert cli.main(["inspect", str(path)]) == 0
    assert f"CUDA graphs: load(cuda_graphs=True) runs it uncaptured: {CPU_REASON}" in capsys.readouterr().out
    assert cli.main(["bench", str(path), "--iters", "2", "--warmup", "1", "--cuda-graphs"]) == 0
    out = capsys.readouterr().out
    assert f"CUDA graphs: not captured ({CPU_REASON})" in out and "package median ms" in out
    assert cli.main(["bench", str(path), "--iters", "2", "--warmup", "1", "--cuda-graphs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cuda_graphs"]["status"] == "not captured"


def test_a_failing_capture_check_never_fails_the_export(monkeypatch, hybrid_logs):
    """Export decides capturability on the GPU it builds on (the engines' probe in a separate process); if that
    check itself fails, the package is written all the same and runs uncaptured, saying why."""
    def broken(_delegated):
        raise OSError("no space left for the probe's bundle")
    monkeypatch.setattr(cudagraphs, "capture_verdicts", broken)
    gm = torch.fx.symbolic_trace(torch.nn.ReLU())
    reasons = cudagraphs.package_reasons([], gm, torch.device("cuda"))
    assert reasons == ["the capture check failed at export: OSError: no space left for the probe's bundle"]
    assert any("could not check whether the package can be captured" in r.getMessage()
               for r in hybrid_logs.records)


def test_verify_with_cuda_graphs_runs_the_references_captured_and_says_whether_they_were(
        cpu_package, cleared_package, stand_in_capture, capsys):
    """``hybrid-trt verify --cuda-graphs``: each reference input uncaptured, captured and replayed, every output
    against the stored one; a package that would run uncaptured fails with its own exit code (8), naming why."""
    from hybrid_trt.export import cli
    model, path = cpu_package
    assert cli.main(["verify", str(path)]) == 0
    assert "cuda_graphs" not in capsys.readouterr().out
    assert cli.main(["verify", str(path), "--cuda-graphs"]) == 8
    out = capsys.readouterr().out
    # (its reference line said "each uncaptured, captured and replayed" above the line saying nothing was)
    assert "PASS  reference" in out and "each called 3 times, uncaptured" in out, out
    assert "captured and replayed" not in out, out
    assert f"FAIL  cuda_graphs  not captured: {CPU_REASON}" in out and "exit code 8" in out, out
    assert cli.main(["verify", str(cleared_package[1]), "--cuda-graphs", "--json"]) == 0
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["cuda_graphs"]["verdict"] == "PASS" and checks["cuda_graphs"]["detail"].startswith("captured whole")
    assert checks["reference"]["detail"].endswith("each uncaptured, captured and replayed"), checks["reference"]
    assert len(stand_in_capture) == 1 and stand_in_capture[0].replays == 2  # the capture's replay, then one more


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("delegated", [False, pytest.param(True, marks=cuda_only)])  # engines need onnxruntime-gpu
def test_a_fresh_process_verifies_a_cuda_package(tmp_path, delegated):
    """``hybrid-trt verify`` in a fresh process, whose first CUDA work is loading the package. On an H100
    (sessions 32-33) the example detector exported in float16 made ``hybrid_trt.load`` (and torch's own
    ``aoti_load_package``) segfault inside AOTInductor's package loader in such a process, unless the system's
    C++ runtime was loaded first (export/deploy.py ``_cxx_runtime_loaded``). That package, with no engine (nothing
    delegated) and with engines."""
    import os
    import pathlib
    import subprocess
    import sys
    from examples.factories import compare_detector, detector
    model, x = detector()
    model, x = model.cuda().half(), x.cuda().half()
    options = {"placement": "delegate"} if delegated else {"min_block_size": 10 ** 6}  # none: AOTInductor alone
    path = hybrid_trt.export(model, (x,), path=tmp_path / "fresh.pkg", options=options, rtol=0.1, atol=0.1,
                             compare=compare_detector)
    parts = json.loads((path / "manifest.json").read_text())["partitions"]
    assert bool(parts) == delegated
    root = pathlib.Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    for args in (["--no-cuda-graphs"], []):
        done = subprocess.run([sys.executable, "-X", "faulthandler", "-m", "hybrid_trt.export.cli", "verify",
                               str(path), "--compare", "examples.factories:compare_detector", *args], env=env,
                              cwd=root, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (args, done.returncode, done.stdout, done.stderr[-3000:])
        assert "PASS  reference" in done.stdout
