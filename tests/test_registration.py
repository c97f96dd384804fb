"""The backend name works in a fresh interpreter without `import hybrid_trt` (torch_dynamo_backends entry point)
and after the import."""
import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    {import_line}
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4),
                                torch.nn.Sigmoid()).eval()
    x = torch.randn(3, 8)
    assert ("hybrid_trt" in sys.modules) == {imported}, "unexpected import state before compiling"
    with torch.no_grad():
        out = torch.compile(model, backend="hybrid_trt")(x)
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
    import hybrid_trt  # only to read the report: the backend above was found without it
    report = hybrid_trt.last_report()
    assert report is not None and report.partitions and report.partitions[0].delegate == "onnxruntime", report
    print("REGISTRATION-OK", report.delegated_op_count)
""")


def _entry_point_installed() -> bool:
    eps = importlib.metadata.entry_points(group="torch_dynamo_backends")
    return any(ep.name == "hybrid_trt" for ep in eps)


def _env(tmp_path):
    """Environment for the child: the installed package (CI: `pip install -e .`), or, in a bare checkout, a
    dist-info built from setup.py's entry point so the same discovery path is exercised."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if _entry_point_installed():
        return env, "installed"
    setup = (ROOT / "setup.py").read_text()
    match = re.search(r"torch_dynamo_backends[\"']\s*:\s*\[\s*[\"']([^\"']+)[\"']", setup)
    assert match, "setup.py declares no torch_dynamo_backends entry point"
    site = tmp_path / "site"
    dist = site / "hybrid_trt-0.0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hybrid_trt\nVersion: 0.0.0\n")
    (dist / "entry_points.txt").write_text(f"[torch_dynamo_backends]\n{match.group(1)}\n")
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    return env, "synthesised"


def _run(tmp_path, import_first: bool, import_line: str = "import hybrid_trt"):
    env, how = _env(tmp_path)
    script = SCRIPT.format(import_line=import_line if import_first else "", imported=import_first)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "REGISTRATION-OK" in proc.stdout, \
        f"entry point ({how}) run failed:\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"


def test_backend_found_without_import(tmp_path):
    _run(tmp_path, import_first=False)


def test_backend_works_after_import(tmp_path):
    _run(tmp_path, import_first=True)


def test_import_after_torch_discovered_the_entry_point(tmp_path):
    # torch has already recorded the (not yet loaded) entry point when the package is imported.
    _run(tmp_path, import_first=True,
         import_line="torch._dynamo.list_backends(exclude_tags=()); import hybrid_trt")


def test_setup_py_declares_the_entry_point():
    setup = (ROOT / "setup.py").read_text()
    assert re.search(r"torch_dynamo_backends[\"']\s*:\s*\[\s*[\"']hybrid_trt\s*=\s*hybrid_trt\.backend:"
                     r"hybrid_trt_backend[\"']", setup), "entry point missing or renamed in setup.py"
    if not _entry_point_installed():
        pytest.skip("package not installed; the subprocess tests used a synthesised dist-info")
