"""The fused rulebook builders (map, output sites and row schedule from one
search pass; strided output sites from a hash table and a sort of the unique
sites only) equal the unfused torch reference.

The Triton launchers run in Triton's interpreter on CPU, which must be on
before Triton is imported, hence the subprocess (this file run as a script).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from hybrid_trt.plugins.sparse import ops  # noqa: E402
from hybrid_trt.plugins.sparse import reference as R  # noqa: E402
from hybrid_trt.plugins.sparse.geometry import conv_output_shape, subm_padding  # noqa: E402
from sparse_dense_ref import random_cloud  # noqa: E402

# kernel_size, stride, padding, dilation
STRIDED = [
    ((3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1)),
    ((2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1)),
    ((3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),  # regular conv at stride 1: many sites per input
    ((2, 3, 1), (2, 1, 3), (0, 1, 0), (1, 2, 1)),
    ((3, 3, 3), (2, 2, 2), (1, 1, 1), (2, 1, 2)),  # dilation sharing a factor with the stride
    ((1, 1, 1), (2, 2, 2), (0, 0, 0), (1, 1, 1)),
    ((5, 5, 5), (2, 2, 2), (2, 2, 2), (1, 1, 1)),  # 125 offsets: the pushed map counts neighbours (atomic_add)
]
SUBM = [((3, 3, 3), (1, 1, 1)), ((3, 1, 3), (2, 1, 1)), ((5, 5, 5), (1, 1, 1))]


def _lattice(shape, step, offset, batch):
    """Every site whose coordinates are offset + multiples of step, per sample."""
    axes = [torch.arange(offset, s, step) for s in shape]
    zyx = torch.cartesian_prod(*axes)
    rows = [torch.cat([torch.full((zyx.shape[0], 1), b), zyx], 1) for b in range(batch)]
    return torch.cat(rows).to(torch.int32)


def _clouds():
    shape = (7, 9, 8)
    yield "random batch 1", shape, random_cloud(1, shape, 0.1, 1, seed=1)[1]
    yield "random batch 3", shape, random_cloud(3, shape, 0.06, 1, seed=2)[1]
    yield "empty", shape, torch.empty((0, 4), dtype=torch.int32)
    yield "single", shape, torch.tensor([[0, 3, 4, 5]], dtype=torch.int32)
    # Sites two apart: with a 2x2x2 / stride 2 kernel no two inputs share an output site.
    yield "lattice step 2", shape, _lattice(shape, 2, 0, 2)
    # Odd coordinates only: a 1x1x1 / stride 2 conv has no output site at all.
    yield "odd lattice", shape, _lattice(shape, 2, 1, 1)
    # Every site active: each output site is reached from many inputs.
    yield "dense", (4, 5, 4), _lattice((4, 5, 4), 1, 0, 2)


def _shuffled(indices, seed):
    g = torch.Generator().manual_seed(seed)
    return indices[torch.randperm(indices.shape[0], generator=g)]


def check() -> int:
    from hybrid_trt.plugins.sparse import triton_rulebook as T

    failures = 0
    for name, shape, indices in _clouds():
        indices = _shuffled(indices, 7)  # input order must not matter
        for ks, dil in SUBM:
            want = R.neighbor_map(indices, indices, shape, ks, (1, 1, 1), subm_padding(ks, dil), dil)
            steps = []
            nbr, order = T.subm_rulebook(indices, shape, ks, dil, mark=steps.append)
            ok = torch.equal(nbr, want) and torch.equal(order, R.mask_order(want)) and order.dtype == torch.int32
            ok = ok and (steps == ["hash table", "search + mask keys", "order (argsort)"] or not indices.shape[0])
            print(f"{name} subm {ks} dil {dil} N={indices.shape[0]} ok={ok}")
            failures += not ok
        for ks, st, pad, dil in STRIDED:
            try:
                out_shape = conv_output_shape(shape, ks, st, pad, dil)
            except ValueError:
                continue
            sites, want = R.strided_rulebook(indices, out_shape, ks, st, pad, dil)
            steps = []
            got = T.strided_rulebook(indices, shape, out_shape, ks, st, pad, dil, mark=steps.append)
            ok = (torch.equal(got[0], sites) and torch.equal(got[1], want)
                  and torch.equal(got[2], R.mask_order(want)) and got[2].dtype == torch.int32)
            ok = ok and torch.equal(got[2], torch.arange(sites.shape[0], dtype=torch.int32))
            ok = ok and (not indices.shape[0] or steps[-1] == "order (identity)")
            print(f"{name} strided {ks} s{st} p{pad} d{dil} N={indices.shape[0]} M={sites.shape[0]} ok={ok}")
            failures += not ok
    print("FAILURES", failures)
    return failures


def test_fused_launchers_equal_reference_interpreted_on_cpu():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "FAILURES 0" in proc.stdout
    assert proc.stdout.count("ok=True") >= 60


@pytest.mark.parametrize("ks,st,pad,dil", STRIDED)
def test_output_sites_per_input_bound_is_tight(ks, st, pad, dil):
    """The strided launcher sizes its site table and list from this bound; it
    must hold for every input and be reached on a dense cloud."""
    pytest.importorskip("triton")
    from hybrid_trt.plugins.sparse.triton_rulebook import _sites_per_input

    shape = (9, 10, 11)
    indices = _lattice(shape, 1, 0, 1)
    out_shape = conv_output_shape(shape, ks, st, pad, dil)
    _, ok = R._strided_pairs(indices, out_shape, ks, st, pad, dil)
    assert int(ok.sum(1).max()) == _sites_per_input(ks, st, dil)


def test_ops_return_the_rulebook_with_its_order():
    _, indices = random_cloud(2, (6, 7, 8), 0.2, 1, seed=3)
    nbr, order = ops.sparse_rulebook_subm_ordered(indices, [6, 7, 8], [3, 3, 3], [1, 1, 1])
    assert torch.equal(nbr, ops.sparse_rulebook_subm(indices, [6, 7, 8], [3, 3, 3], [1, 1, 1]))
    assert torch.equal(order, ops.sparse_rulebook_order(nbr))
    sites, nbr, order = ops.sparse_rulebook_strided(indices, [6, 7, 8], [3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1])
    assert sites.shape == (nbr.shape[0], 4) and torch.equal(order, ops.sparse_rulebook_order(nbr))
    empty = indices[:0]
    nbr, order = ops.sparse_rulebook_subm_ordered(empty, [6, 7, 8], [3, 3, 3], [1, 1, 1])
    assert nbr.shape == (0, 27) and order.shape == (0,) and order.dtype == torch.int32


if __name__ == "__main__":
    sys.exit(1 if check() else 0)
