"""The one-pass strided rulebook equals the two-pass construction (output sites, then hash-and-search)."""
import pytest
import torch

from hybrid_trt.plugins.sparse import reference
from hybrid_trt.plugins.sparse.geometry import conv_output_shape


def _cloud(n, shape, batch, seed):
    g = torch.Generator().manual_seed(seed)
    coords = torch.stack([torch.randint(0, s, (n,), generator=g) for s in shape], 1)
    b = torch.randint(0, batch, (n, 1), generator=g)
    return torch.unique(torch.cat([b, coords], 1), dim=0).to(torch.int32)


@pytest.mark.parametrize("ks,st,pad,dil", [((3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1)),
                                           ((2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1)),
                                           ((3, 1, 3), (2, 1, 1), (0, 0, 1), (1, 1, 2)),
                                           ((3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1))])
@pytest.mark.parametrize("n", [0, 1, 300])
def test_one_pass_equals_two_pass(ks, st, pad, dil, n):
    shape = (9, 12, 11)
    indices = _cloud(n, shape, 2, seed=n + sum(ks)) if n else torch.empty((0, 4), dtype=torch.int32)
    out_shape = conv_output_shape(shape, ks, st, pad, dil)
    sites, nbr = reference.strided_rulebook(indices, out_shape, ks, st, pad, dil)
    by_key = reference.strided_out_indices(indices, out_shape, ks, st, pad, dil)
    nbr_by_key = reference.neighbor_map(by_key, indices, shape, ks, st, pad, dil)
    # The one-pass rulebook puts the sites in row-schedule order: by mask key, ties by site key.
    order = reference.mask_order(nbr_by_key).long()
    assert torch.equal(sites, by_key[order])
    assert nbr.dtype == torch.int32 and torch.equal(nbr, nbr_by_key[order])
    assert torch.equal(reference.mask_order(nbr), torch.arange(nbr.shape[0], dtype=torch.int32))
    if n:
        assert (nbr >= 0).any()
    if n > 1:
        assert not torch.equal(order, torch.arange(order.shape[0]))  # the reordering was exercised
