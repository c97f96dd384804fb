"""Inductor's on-disk caches must neither hand a plain-Inductor result to hybrid_trt nor store hybrid graphs
(whose delegate handles are process-local) for plain Inductor to pick up."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_inductor_cache_does_not_shadow_hybrid(tmp_path):
    code = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {ROOT!r})
        import hybrid_trt
        from examples.models import build
        model, x = build("transformer", small=True)
        with torch.no_grad():
            ref = model(x)
            torch.compile(model, backend="inductor")(x)        # fills the caches for this graph
            torch._dynamo.reset()
            out = torch.compile(model, backend="hybrid_trt")(x)
            rep = hybrid_trt.last_report()
            assert rep.delegated_op_count > 0, rep.table()
            torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
            torch._dynamo.reset()
            plain = torch.compile(model, backend="inductor")(x)  # must not pick up a hybrid graph
            torch.testing.assert_close(plain, ref, rtol=1e-4, atol=1e-4)
        print("delegated", rep.delegated_op_count)
    """)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "delegated" in proc.stdout
