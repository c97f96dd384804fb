"""Models of the export tests, as ``MODULE:FACTORY`` functions (``hybrid-trt export export_models:resnet18``).

Each factory returns ``(model, example_inputs)``. Importing this module also registers ``export_test::shuffle``,
a user ``torch.library`` custom op no delegate takes: a process that loads a package using it imports this
module first, as a deployment imports the library that defines its custom ops.
"""
from __future__ import annotations

import collections
import pathlib
import sys

import torch
import torch.nn as nn

_ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from examples import models  # noqa: E402


@torch.library.custom_op("export_test::shuffle", mutates_args=())
def shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Channel shuffle (ShuffleNet), as a user's opaque op: its kernel is plain PyTorch."""
    b, c, h, w = x.shape
    return x.reshape(b, groups, c // groups, h, w).transpose(1, 2).reshape(b, c, h, w).contiguous()


@shuffle.register_fake
def _(x, groups):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


class ShuffledDetector(models.CenterHeadDetector):
    """The example detector with a user custom op between its backbone stages: delegated partitions on both
    sides of it, and atan2 (no lowering) in the decode step left to Inductor."""

    def forward(self, x):
        c1 = torch.ops.export_test.shuffle(self.stage1(self.stem(x)), 4)
        c2 = self.stage2(c1)
        p = self.fuse(c1 + nn.functional.interpolate(self.lateral(c2), scale_factor=2, mode="nearest"))
        return self.decode(p, x.dtype)

    def decode(self, p, dtype):
        heat = torch.sigmoid(self.heatmap(p))
        peaks = heat * (nn.functional.max_pool2d(heat, 3, 1, 1) == heat).to(heat.dtype)
        b, c, h, w = peaks.shape
        scores, idx = torch.topk(peaks.reshape(b, -1), self.k)
        pix = idx % (h * w)
        reg = self.regress(p).reshape(b, 6, h * w)
        reg = torch.gather(reg, 2, pix.unsqueeze(1).expand(b, 6, self.k))
        yaw = torch.atan2(reg[:, 4], reg[:, 5])  # no lowering: stays with Inductor
        boxes = torch.stack([(pix % w).to(dtype) + reg[:, 0], (pix // w).to(dtype) + reg[:, 1], yaw], dim=-1)
        return boxes, scores


def resnet18():
    torch.manual_seed(0)
    model = models._randomize_bn(models.resnet18(num_classes=10, width=8)).eval()
    return model, (torch.randn(1, 3, 32, 32),)


def detector():
    torch.manual_seed(0)
    model = models._randomize_bn(ShuffledDetector(width=8, k=10)).eval()
    return model, (torch.randn(1, 3, 64, 64),)


class TwoInputs(nn.Module):
    """Two inputs of which the batch dimension varies: an image branch and a feature vector branch."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU())
        self.mlp = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8))

    def forward(self, image, features):
        pooled = self.conv(image).mean(dim=(2, 3))
        return torch.cat([pooled, self.mlp(features)], dim=1).softmax(dim=1)


def two_inputs():
    torch.manual_seed(0)
    model = models._randomize_bn(TwoInputs()).eval()
    return model, (torch.randn(2, 3, 16, 16), torch.randn(2, 6))


class MultiModal(torch.nn.Module):
    """A camera + LiDAR model called with one dict (a common perception interface) and a list."""

    def __init__(self):
        super().__init__()
        self.img = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                       torch.nn.Flatten())
        self.pts = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

    def forward(self, batch, scales):
        fused = self.img(batch["image"]) + self.pts(batch["points"]).amax(1) * scales[0]
        return {"fused": fused, "img": self.img(batch["image"]) * scales[1]}


def multimodal_inputs(n):
    return ({"image": torch.randn(n, 3, 8, 8), "points": torch.randn(n, 10, 4)}, [torch.randn(4), torch.randn(4)])


def multimodal():
    torch.manual_seed(0)
    return MultiModal().eval(), multimodal_inputs(2)


def lidar():
    from examples import lidar_detector
    model = lidar_detector.build_model("small")
    return model, lidar_detector.make_inputs("small")


class ClassToken(nn.Module):
    """A ViT-style head: patch embedding, a learned class token broadcast to the batch and prepended, a linear
    layer on the class token. The token's Expand makes a size-1 dim the batch, a size no constant target
    expresses: its target is read from the input's shape, so a dynamic batch gets one engine."""

    def __init__(self, dim=16):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, stride=4)
        self.token = nn.Parameter(torch.randn(1, 1, dim))
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        patches = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.token.expand(x.shape[0], -1, -1), patches], dim=1)
        return self.head(torch.relu(tokens).mean(dim=1))


def class_token():
    torch.manual_seed(0)
    return ClassToken().eval(), (torch.randn(2, 3, 16, 16),)


class DoubledToken(ClassToken):
    """Two learned queries per image: a token broadcast to twice the batch, a size no tensor of the partition has
    and no constant target expresses, so a dynamic batch keeps engines per shape."""

    def forward(self, x):
        feats = self.patch(x).flatten(2).mean(2)
        queries = self.token.expand(2 * x.shape[0], -1, -1).reshape(x.shape[0], 2, -1)
        return self.head(torch.relu(queries + feats[:, None]).mean(1))


def doubled_token():
    torch.manual_seed(0)
    return DoubledToken().eval(), (torch.randn(2, 3, 16, 16),)


class NormHead(nn.Module):
    """ConvNeXt's classifier head (timm's NormMlpClassifierHead): pool, a channels-last LayerNorm on the pooled
    (B, C, 1, 1) tensor, flatten, linear. Its decomposition restrides the pooled tensor (``as_strided``)."""

    def __init__(self, dim=16):
        super().__init__()
        self.stem = nn.Conv2d(3, dim, 4, stride=4)
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 10)

    def forward(self, x):
        pooled = self.stem(x).relu().mean((2, 3), keepdim=True)
        normed = self.norm(pooled.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.fc(normed.flatten(1))


def norm_head():
    torch.manual_seed(0)
    return NormHead().eval(), (torch.randn(1, 3, 16, 16),)


class _ScoresInAnotherOrder(nn.Module):
    """Right scores in another order: the package (what torch.export traced) returns them reversed, as float16 on a
    GPU can order a top-k's near-equal scores otherwise than eager does. Element by element the outputs differ."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        scores = torch.sigmoid(self.conv(x)).flatten(1)
        return scores.flip(-1) if torch.compiler.is_exporting() else scores


def scores_in_another_order():
    torch.manual_seed(0)
    return _ScoresInAnotherOrder().eval(), (torch.randn(1, 3, 8, 8),)


def same_scores(got, expected):
    """The comparison for ``scores_in_another_order``: the same values, in any order."""
    torch.testing.assert_close(got[0].sort(-1).values, expected[0].sort(-1).values, rtol=1e-4, atol=1e-5)


Scaled = collections.namedtuple("Scaled", "image scale")
Heads = collections.namedtuple("Heads", "features activated")


class NamedTupleIO(nn.Module):
    """Takes a namedtuple and returns one inside a dict: torch's spec serializer refused the namedtuple, so export
    failed after building every engine (NotImplementedError: Can't serialize TreeSpec of namedtuple class ...)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, inp):
        y = self.conv(inp.image) * inp.scale
        return {"heads": Heads(y, y.relu()), "total": [y.sum()]}


def namedtuple_io():
    torch.manual_seed(0)
    return NamedTupleIO().eval(), (Scaled(torch.randn(1, 3, 16, 16), torch.tensor(2.0)),)
