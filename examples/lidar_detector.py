"""A SECOND / CenterPoint-style LiDAR 3D detector with random weights.

voxel features -> sparse 3D backbone (SubM + strided sparse convs, spconv
style, from ``hybrid_trt.plugins.sparse``) -> height compression to a dense
BEV map -> 2D backbone and FPN-style neck -> CenterPoint heads -> top-k
decode into boxes.

    python examples/lidar_detector.py                 # small config, CPU
    python examples/lidar_detector.py --config realistic --device cuda --dtype fp16

``__main__`` runs the model eagerly and through ``torch.compile(backend=
"inductor", fullgraph=True)`` and checks both give the same detections.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import pathlib
import sys
import time

import torch
from torch import nn

if __package__ in (None, ""):
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from examples.detections import compare_detections  # noqa: E402,F401 - this module's callers use it from here
from hybrid_trt.plugins.sparse import (  # noqa: E402
    SparseConv3d,
    SparseConvTensor,
    SparseSequential,
    SubMConv3d,
)

log = logging.getLogger("hybrid_trt")


@dataclasses.dataclass(frozen=True)
class DetectorConfig:
    grid: tuple[int, int, int]  # (D, H, W) = (z, y, x) voxels
    voxels_per_sample: int
    batch_size: int = 1
    num_point_features: int = 4  # x, y, z, intensity (mean-VFE output)
    sparse_channels: tuple[int, ...] = (16, 32, 64, 64, 128)
    bev_channels: tuple[int, int] = (128, 256)
    neck_channels: int = 256
    head_channels: int = 64
    num_classes: int = 3
    top_k: int = 100
    voxel_size: tuple[float, float, float] = (0.1, 0.05, 0.05)  # (z, y, x) metres
    point_cloud_origin: tuple[float, float, float] = (-3.0, -40.0, 0.0)


CONFIGS = {
    # Runs in seconds on a CPU; used by the tests.
    "small": DetectorConfig(
        grid=(41, 96, 96), voxels_per_sample=1500, batch_size=2,
        sparse_channels=(8, 16, 16, 32, 32), bev_channels=(32, 64), neck_channels=32,
        head_channels=16, top_k=20,
    ),
    # KITTI-like SECOND grid: 41 x 1600 x 1408 at 0.1 x 0.05 x 0.05 m.
    "realistic": DetectorConfig(grid=(41, 1600, 1408), voxels_per_sample=40000, batch_size=1),
}


def _bn_relu_1d(c: int) -> list[nn.Module]:
    return [nn.BatchNorm1d(c, eps=1e-3, momentum=0.01), nn.ReLU()]


def _subm(cin: int, cout: int, key: str) -> list[nn.Module]:
    return [SubMConv3d(cin, cout, 3, bias=False, indice_key=key), *_bn_relu_1d(cout)]


def _down(cin: int, cout: int, key: str, stride=2, padding=1, kernel_size=3) -> list[nn.Module]:
    return [
        SparseConv3d(cin, cout, kernel_size, stride=stride, padding=padding, bias=False, indice_key=key),
        *_bn_relu_1d(cout),
    ]


class SparseBackbone8x(nn.Module):
    """SECOND's VoxelBackBone8x: 8x downsampling in x/y, SubM blocks sharing
    a rulebook per resolution through ``indice_key``."""

    def __init__(self, cin: int, channels: tuple[int, ...]):
        super().__init__()
        c0, c1, c2, c3, c_out = channels
        self.net = SparseSequential(
            *_subm(cin, c0, "subm1"),
            *_subm(c0, c0, "subm1"),
            *_down(c0, c1, "spconv2"), *_subm(c1, c1, "subm2"), *_subm(c1, c1, "subm2"),
            *_down(c1, c2, "spconv3"), *_subm(c2, c2, "subm3"), *_subm(c2, c2, "subm3"),
            *_down(c2, c3, "spconv4", padding=(0, 1, 1)), *_subm(c3, c3, "subm4"), *_subm(c3, c3, "subm4"),
            # Squash the remaining height before the BEV view, as SECOND does.
            *_down(c3, c_out, "spconv_down2", stride=(2, 1, 1), padding=0, kernel_size=(3, 1, 1)),
        )

    def forward(self, x: SparseConvTensor) -> SparseConvTensor:
        return self.net(x)


def _conv_bn_relu(cin: int, cout: int, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout, eps=1e-3), nn.ReLU()]


class BEVBackboneNeck(nn.Module):
    """SECOND's BaseBEVBackbone: two stages (stride 1 and 2) and a neck that
    brings both to the first stage's resolution and concatenates them."""

    def __init__(self, cin: int, channels: tuple[int, int], neck: int):
        super().__init__()
        c1, c2 = channels
        self.stage1 = nn.Sequential(*_conv_bn_relu(cin, c1), *_conv_bn_relu(c1, c1), *_conv_bn_relu(c1, c1))
        self.stage2 = nn.Sequential(*_conv_bn_relu(c1, c2, stride=2), *_conv_bn_relu(c2, c2), *_conv_bn_relu(c2, c2))
        self.up1 = nn.Sequential(nn.Conv2d(c1, neck, 1, bias=False), nn.BatchNorm2d(neck, eps=1e-3), nn.ReLU())
        self.up2 = nn.Sequential(
            nn.ConvTranspose2d(c2, neck, 2, stride=2, bias=False), nn.BatchNorm2d(neck, eps=1e-3), nn.ReLU()
        )

    def forward(self, bev: torch.Tensor) -> torch.Tensor:
        s1 = self.stage1(bev)
        s2 = self.stage2(s1)
        return torch.cat([self.up1(s1), self.up2(s2)], dim=1)


class CenterHead(nn.Module):
    """CenterPoint head: class heatmap plus per-pixel box regression."""

    OUTPUTS = {"center": 2, "height": 1, "dim": 3, "rot": 2}

    def __init__(self, cin: int, hidden: int, num_classes: int):
        super().__init__()
        self.shared = nn.Sequential(*_conv_bn_relu(cin, hidden))
        self.heatmap = nn.Sequential(*_conv_bn_relu(hidden, hidden), nn.Conv2d(hidden, num_classes, 1))
        nn.init.constant_(self.heatmap[-1].bias, -2.19)  # CenterPoint's focal-loss prior
        self.regs = nn.ModuleDict(
            {k: nn.Sequential(*_conv_bn_relu(hidden, hidden), nn.Conv2d(hidden, c, 1)) for k, c in self.OUTPUTS.items()}
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.shared(x)
        reg = torch.cat([self.regs[k](x) for k in self.OUTPUTS], dim=1)  # [B, 8, H, W]
        return self.heatmap(x), reg


class LidarDetector(nn.Module):
    def __init__(self, cfg: DetectorConfig):
        super().__init__()
        self.cfg = cfg
        self.backbone3d = SparseBackbone8x(cfg.num_point_features, cfg.sparse_channels)
        self.bev_height = self._bev_height(cfg.grid)
        bev_in = cfg.sparse_channels[-1] * self.bev_height
        self.backbone2d = BEVBackboneNeck(bev_in, cfg.bev_channels, cfg.neck_channels)
        self.head = CenterHead(2 * cfg.neck_channels, cfg.head_channels, cfg.num_classes)
        # Metres per BEV pixel and the BEV origin, for decoding (8x stride in y/x).
        self.register_buffer("bev_scale", torch.tensor([cfg.voxel_size[2] * 8, cfg.voxel_size[1] * 8]),
                             persistent=False)
        self.register_buffer(
            "bev_origin", torch.tensor([cfg.point_cloud_origin[2], cfg.point_cloud_origin[1]]), persistent=False
        )

    @staticmethod
    def _bev_height(grid) -> int:
        d = grid[0]
        for k, s, p in ((3, 2, 1), (3, 2, 1), (3, 2, 0), (3, 2, 0)):
            d = (d + 2 * p - k) // s + 1
        if d <= 0:
            raise ValueError(f"grid depth {grid[0]} is too small for the 3D backbone; use at least 23 voxels in z")
        return d

    def forward(self, voxel_features: torch.Tensor, voxel_coords: torch.Tensor):
        cfg = self.cfg
        x = SparseConvTensor(voxel_features, voxel_coords, cfg.grid, cfg.batch_size)
        x = self.backbone3d(x)
        dense = x.dense()  # [B, C, D', H', W']
        b, c, d, h, w = dense.shape
        bev = dense.reshape(b, c * d, h, w)  # height compression
        heatmap, reg = self.head(self.backbone2d(bev))
        return self.decode(heatmap, reg)

    def decode(self, heatmap: torch.Tensor, reg: torch.Tensor):
        """CenterPoint decode: 3x3 max-pool NMS on the heatmap, top-k peaks,
        boxes (x, y, z, dx, dy, dz, heading) in metres at the peaks."""
        b, ncls, h, w = heatmap.shape
        scores = heatmap.float().sigmoid()
        peaks = nn.functional.max_pool2d(scores, 3, stride=1, padding=1)
        scores = scores * (peaks == scores)
        top_scores, top_idx = scores.reshape(b, -1).topk(self.cfg.top_k, dim=1)
        labels = top_idx // (h * w)
        pix = top_idx % (h * w)
        ys, xs = (pix // w).float(), (pix % w).float()
        reg = reg.float().reshape(b, reg.shape[1], h * w)
        r = torch.gather(reg, 2, pix[:, None, :].expand(-1, reg.shape[1], -1))  # [B, 8, K]
        cx = (xs + r[:, 0]) * self.bev_scale[0] + self.bev_origin[0]
        cy = (ys + r[:, 1]) * self.bev_scale[1] + self.bev_origin[1]
        z = r[:, 2]
        dims = r[:, 3:6].exp()
        heading = torch.atan2(r[:, 6], r[:, 7])
        boxes = torch.stack([cx, cy, z, dims[:, 0], dims[:, 1], dims[:, 2], heading], dim=-1)
        return boxes, top_scores, labels


def build_model(config: str | DetectorConfig = "small") -> LidarDetector:
    """Random weights, seeded: He-normal convolutions, and BatchNorm statistics
    randomised too so eval-mode BN is not the identity."""
    cfg = CONFIGS[config] if isinstance(config, str) else config
    model = LidarDetector(cfg)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
        _signal_preserving_init(model, g)
    return model.eval()


def _signal_preserving_init(model: LidarDetector, g: torch.Generator) -> None:
    """He-normal weights for every convolution (sparse ones included), so activations keep their scale through
    the depth of the network, as trained weights do. PyTorch's default fan-in init shrinks them at every layer:
    the class logits then vary by ~0.05, empty and border areas form plateaus of equal score, and the top-k is a
    tie among plateau pixels (any choice is right, so backends legitimately disagree on the boxes)."""
    for m in model.modules():
        weight = getattr(m, "weight", None)
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, SubMConv3d, SparseConv3d)):
            fan_in = weight[0].numel() if not isinstance(m, nn.ConvTranspose2d) else weight.shape[0]
            weight.normal_(0.0, (2.0 / fan_in) ** 0.5, generator=g)
    # Class logits spread by a few units around the prior, like a trained head's: distinct peak scores.
    model.head.heatmap[-1].weight.mul_(3.0)


def make_inputs(config: str | DetectorConfig = "small", device="cpu", dtype=torch.float32, seed: int = 0):
    """A synthetic voxelised LiDAR sweep per sample: a ground band near the
    bottom of the grid plus clustered object voxels, deduplicated. Returns
    ``(voxel_features [N, 4], voxel_coords int32 [N, 4] = (b, z, y, x))``."""
    cfg = CONFIGS[config] if isinstance(config, str) else config
    g = torch.Generator().manual_seed(seed)
    D, H, W = cfg.grid
    coords = []
    for b in range(cfg.batch_size):
        n = cfg.voxels_per_sample
        n_ground = n // 2
        ground = torch.stack(
            [
                torch.randint(0, max(D // 8, 1), (2 * n_ground,), generator=g),
                torch.randint(0, H, (2 * n_ground,), generator=g),
                torch.randint(0, W, (2 * n_ground,), generator=g),
            ],
            dim=1,
        )
        n_clusters = max(n // 150, 1)
        centres = torch.stack(
            [
                torch.randint(0, D // 2 + 1, (n_clusters,), generator=g),
                torch.randint(0, H, (n_clusters,), generator=g),
                torch.randint(0, W, (n_clusters,), generator=g),
            ],
            dim=1,
        )
        which = torch.randint(0, n_clusters, (2 * (n - n_ground),), generator=g)
        spread = torch.tensor([2.0, 6.0, 6.0])
        objects = centres[which] + (torch.randn((which.shape[0], 3), generator=g) * spread).round().long()
        zyx = torch.cat([ground, objects])
        zyx = torch.minimum(zyx.clamp(min=0), torch.tensor([D - 1, H - 1, W - 1]))
        keys = (zyx[:, 0] * H + zyx[:, 1]) * W + zyx[:, 2]
        # Keep the first occurrence of each voxel, in the random order drawn.
        uniq, inverse = torch.unique(keys, return_inverse=True)
        first = torch.full((uniq.shape[0],), keys.shape[0], dtype=torch.long).scatter_reduce(
            0, inverse, torch.arange(keys.shape[0]), reduce="amin"
        )
        first = first.sort().values[:n]
        zyx = zyx[first]
        coords.append(torch.cat([torch.full((zyx.shape[0], 1), b), zyx], dim=1))
    coords = torch.cat(coords).to(torch.int32)
    metric = (coords[:, 1:].float() + 0.5) * torch.tensor(cfg.voxel_size) + torch.tensor(cfg.point_cloud_origin)
    intensity = torch.rand((coords.shape[0], 1), generator=g)
    features = torch.cat([metric.flip(1), intensity], dim=1)  # (x, y, z, intensity)
    return features.to(device=device, dtype=dtype), coords.to(device)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=sorted(CONFIGS), default="small")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=("fp32", "fp16"), default="fp32")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    dtype = {"fp32": torch.float32, "fp16": torch.float16}[args.dtype]

    model = build_model(args.config).to(device=args.device, dtype=dtype)
    feats, coords = make_inputs(args.config, args.device, dtype, args.seed)
    log.info("%s config: %d active voxels, grid %s, batch %d", args.config, coords.shape[0],
             model.cfg.grid, model.cfg.batch_size)
    with torch.inference_mode():
        t0 = time.perf_counter()
        eager = model(feats, coords)
        log.info("eager: %.3f s", time.perf_counter() - t0)
        # Strided sparse convs have data-dependent output sizes; newer torch
        # allows capturing them under fullgraph=True, older needs this flag.
        torch._dynamo.config.capture_dynamic_output_shape_ops = True
        compiled = torch.compile(model, backend="inductor", fullgraph=True)
        t0 = time.perf_counter()
        out = compiled(feats, coords)
        log.info("inductor (first call, includes compile): %.1f s", time.perf_counter() - t0)
        # A second sweep with a different voxel count must not recompile into a failure.
        feats2, coords2 = make_inputs(args.config, args.device, dtype, args.seed + 1)
        out2, eager2 = compiled(feats2, coords2), model(feats2, coords2)
    tol = dict(atol=1e-3, rtol=1e-3) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    compare_detections(eager, out, **tol)
    compare_detections(eager2, out2, **tol)
    log.info("eager and inductor agree; top scores %s", eager[1][0, :5].tolist())
    return 0


if __name__ == "__main__":
    sys.exit(main())
