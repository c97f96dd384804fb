"""Triton kernels of the sparse ops against the torch reference.

On CPU they run in Triton's interpreter, which must be switched on before
Triton is imported, hence the subprocess."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import torch

_SCRIPT = pathlib.Path(__file__).with_name("sparse_triton_check.py")


def test_triton_kernels_interpreted_on_cpu():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, str(_SCRIPT), "cpu"], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "FAILURES 0" in proc.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_triton_kernels_on_cuda():
    proc = subprocess.run(
        [sys.executable, str(_SCRIPT), "cuda"], capture_output=True, text=True, timeout=600,
        env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
