"""Blocks of camera/LiDAR perception models that nobody here designed a lowering around (BEV sampling, pillar
scatter, a CenterPoint-style head, decoder upsampling, deformable conv, masked einsum attention, NMS, RoIAlign,
video conv, a recurrent head), each compiled with default options and compared with eager: values, shapes and
strides, on two calls. Ops no delegate takes must stay with Inductor, never fail."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hybrid_trt
from _helpers import assert_close

torchvision = pytest.importorskip("torchvision")


class GridSampleBEV(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x, grid):
        return self.conv(F.grid_sample(torch.relu(self.conv(x)), grid, align_corners=False))


class PillarScatter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.conv = nn.Linear(4, 16), nn.Conv2d(16, 8, 3, padding=1)

    def forward(self, feats, idx):
        f = torch.relu(self.lin(feats))
        canvas = f.new_zeros(16, 32 * 32).index_put((torch.arange(16)[:, None], idx[None, :]), f.t())
        return self.conv(canvas.view(1, 16, 32, 32))


class CenterHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 3, 1)

    def forward(self, x):
        hm = torch.sigmoid(self.conv(x))
        keep = (F.max_pool2d(hm, 3, 1, 1) == hm).float() * hm
        scores, inds = keep.flatten(1).topk(10)
        return scores, inds, torch.gather(x.flatten(2), 2, (inds % 256)[:, None, :].expand(-1, 8, -1))


class UpBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.gn = nn.ConvTranspose2d(8, 8, 2, 2), nn.GroupNorm(2, 8)
        self.ps, self.conv = nn.PixelShuffle(2), nn.Conv2d(2, 4, 3, padding=1)

    def forward(self, x):
        y = F.interpolate(F.silu(self.gn(self.up(x))), scale_factor=2, mode="bilinear", align_corners=True)
        return self.conv(self.ps(y))


class DeformBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.off, self.dc = nn.Conv2d(8, 18, 3, padding=1), torchvision.ops.DeformConv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.dc(x, self.off(x))


class MaskedEinsumAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.ln = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16), nn.LayerNorm(16)

    def forward(self, x, mask):
        a = torch.einsum("bqd,bkd->bqk", self.q(x), self.k(x)) / 4.0
        a = a.masked_fill(~mask[:, None, :], float("-inf")).softmax(-1)
        return self.ln(torch.einsum("bqk,bkd->bqd", a, self.v(x)) + x)


class CumsumNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn, self.conv = nn.BatchNorm1d(8), nn.Conv1d(8, 8, 3, padding=1)

    def forward(self, x):
        return torch.cumsum(self.bn(self.conv(x)), -1).clamp(-5, 5) + x.mean(-1, keepdim=True)


class NMSDecode(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 5)

    def forward(self, x):
        o = self.lin(x)
        boxes = torch.cat([o[:, :2], o[:, :2] + o[:, 2:4].exp()], 1)
        scores = o[:, 4].sigmoid()
        keep = torchvision.ops.nms(boxes, scores, 0.5)
        return boxes[keep], scores[keep]


class RoIHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(8, 8, 3, padding=1), nn.Linear(8 * 7 * 7, 4)

    def forward(self, x, rois):
        return self.fc(torchvision.ops.roi_align(torch.relu(self.conv(x)), rois, 7, 0.5, 2).flatten(1))


class VideoConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.c, self.bn = nn.Conv3d(3, 8, 3, padding=1), nn.BatchNorm3d(8)

    def forward(self, x):
        return F.adaptive_avg_pool3d(F.hardswish(self.bn(self.c(x))), 1).flatten(1)


class RecurrentHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru, self.fc = nn.GRU(8, 16, batch_first=True), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc(self.gru(x)[0][:, -1])


def _cases():
    g = torch.Generator().manual_seed(0)
    rand = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return {
        "grid_sample_bev": (GridSampleBEV, (rand(2, 8, 16, 16), torch.rand(2, 12, 12, 2, generator=g) * 2 - 1)),
        "pillar_scatter": (PillarScatter, (rand(50, 4), torch.randperm(1024, generator=g)[:50])),
        "center_head_topk_gather": (CenterHead, (rand(2, 8, 16, 16),)),
        "upsampling_decoder": (UpBlock, (rand(2, 8, 8, 8),)),
        "deformable_conv": (DeformBlock, (rand(1, 8, 10, 10),)),
        "masked_einsum_attention": (MaskedEinsumAttention, (rand(2, 12, 16), torch.rand(2, 12, generator=g) > 0.3)),
        "cumsum_batchnorm1d": (CumsumNorm, (rand(2, 8, 20),)),
        "nms_decode": (NMSDecode, (rand(30, 4),)),
        "roi_align_head": (RoIHead, (rand(1, 8, 16, 16), torch.tensor([[0, 1., 1., 9., 9.], [0, 2., 3., 12., 14.]]))),
        "video_conv3d": (VideoConv, (rand(1, 3, 4, 16, 16),)),
        "recurrent_head": (RecurrentHead, (rand(2, 6, 8),)),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_block_compiles_and_matches_eager(name):
    cls, args = _cases()[name]
    torch.manual_seed(0)
    model = cls().eval()
    with torch.no_grad():
        expected = model(*args)
        compiled = torch.compile(model, backend="hybrid_trt")
        for _ in range(2):
            out = compiled(*args)
            leaves = (out,) if isinstance(out, torch.Tensor) else out
            ref = (expected,) if isinstance(expected, torch.Tensor) else expected
            assert len(leaves) == len(ref)
            for got, want in zip(leaves, ref):
                assert got.dtype == want.dtype and got.shape == want.shape
                assert got.stride() == want.stride(), (name, got.stride(), want.stride())
                assert_close(got, want, what=name)
    report = hybrid_trt.last_report()
    assert report is not None and not any("fell back" in p.status for p in report.partitions), report.table()
