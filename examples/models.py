"""Example models used by the demo, the tests and the benchmarks (random weights, no downloads).

- ``resnet18``: the torchvision ResNet-18 architecture, written out here so no torchvision is needed.
- ``CenterHeadDetector``: a camera/BEV perception model (conv backbone, FPN-style upsampling neck, CenterPoint-
  style heads) whose decode step uses ``atan2``, which no ONNX lowering exists for: the graph must split.
- ``TransformerBlock``: pre-norm self-attention and MLP.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.down(x) if self.down is not None else x))


class ResNet(nn.Module):
    def __init__(self, layers=(2, 2, 2, 2), widths=(64, 128, 256, 512), num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        blocks, cin = [], widths[0]
        for i, (n, w) in enumerate(zip(layers, widths)):
            for j in range(n):
                blocks.append(BasicBlock(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet18(num_classes=1000, width=64):
    return ResNet(widths=tuple(width * m for m in (1, 2, 4, 8)), num_classes=num_classes)


def _randomize_bn(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial running statistics, so batch-norm folding is actually exercised."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model


class CenterHeadDetector(nn.Module):
    """Backbone -> upsampling neck -> heatmap/offset/size/rotation heads -> top-k decode."""

    def __init__(self, in_ch=3, width=32, num_classes=3, k=20):
        super().__init__()
        self.k = k
        self.stem = nn.Sequential(nn.Conv2d(in_ch, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.stage1 = BasicBlock(width, width * 2, 2)
        self.stage2 = BasicBlock(width * 2, width * 4, 2)
        self.lateral = nn.Conv2d(width * 4, width * 2, 1)
        self.fuse = nn.Sequential(nn.Conv2d(width * 2, width * 2, 3, 1, 1), nn.BatchNorm2d(width * 2), nn.SiLU())
        self.heatmap = nn.Conv2d(width * 2, num_classes, 1)
        self.regress = nn.Conv2d(width * 2, 6, 1)  # dx, dy, log w, log l, sin, cos

    def forward(self, x):
        c1 = self.stage1(self.stem(x))
        c2 = self.stage2(c1)
        p = self.fuse(c1 + F.interpolate(self.lateral(c2), scale_factor=2, mode="nearest"))
        heat = torch.sigmoid(self.heatmap(p))
        peaks = heat * (F.max_pool2d(heat, 3, 1, 1) == heat).to(heat.dtype)  # simple NMS
        b, c, h, w = peaks.shape
        scores, idx = torch.topk(peaks.reshape(b, -1), self.k)
        cls = idx // (h * w)
        pix = idx % (h * w)
        reg = self.regress(p).reshape(b, 6, h * w)
        reg = torch.gather(reg, 2, pix.unsqueeze(1).expand(b, 6, self.k))
        ys = (pix // w).to(x.dtype) + reg[:, 1]
        xs = (pix % w).to(x.dtype) + reg[:, 0]
        size = torch.exp(reg[:, 2:4])
        yaw = torch.atan2(reg[:, 4], reg[:, 5])  # no ONNX op: stays with Inductor
        boxes = torch.stack([xs, ys, size[:, 0], size[:, 1], yaw], dim=-1)
        return boxes, scores, cls


class TransformerBlock(nn.Module):
    def __init__(self, dim=64, heads=4, mlp=4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp * dim)
        self.fc2 = nn.Linear(mlp * dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5, dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def build(name: str, small: bool = False):
    """(model in eval mode, example input) for each example by name."""
    torch.manual_seed(0)
    if name == "resnet18":
        model = resnet18(num_classes=10 if small else 1000, width=8 if small else 64)
        x = torch.randn(1, 3, 32, 32) if small else torch.randn(1, 3, 224, 224)
    elif name == "detector":
        model = CenterHeadDetector(width=8 if small else 32, k=10 if small else 50)
        x = torch.randn(1, 3, 64, 64) if small else torch.randn(1, 3, 256, 256)
    elif name == "transformer":
        model = TransformerBlock(dim=32 if small else 256, heads=4 if small else 8)
        x = torch.randn(2, 16, 32) if small else torch.randn(1, 196, 256)
    else:
        raise ValueError(f"unknown example {name!r}; valid: resnet18, detector, transformer")
    return _randomize_bn(model).eval(), x


EXAMPLES = ("resnet18", "detector", "transformer")
