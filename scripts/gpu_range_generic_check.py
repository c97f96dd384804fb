"""Check of one engine for a dynamic range on the shape-generic Slice/Resize/constant lowerings
(lowerings/ops/_dims.py) on a GPU delegate: export tests/test_ranges_generic.py's small detector head (FPN
top-down step with a Shape-read Resize size, slices and a select from the end, an arange ramp via Range, an x2
align_corners upsample via scales) with batch [1..4] and h, w [4..12], load it, and run min, opt, max and an
unlisted in-between shape against eager. Prints one RANGE_GENERIC line: per partition its delegate, ranges and
per_shape_reason (want one range, reason null), and the max abs error per shape (want <= 1e-4 in fp32).
``python3 scripts/gpu_range_generic_check.py [cuda|cpu] [KEY=VALUE options...]``, e.g. ``cuda
delegates=tensorrt`` for TensorRT (one engine with one optimization profile)."""
import json
import pathlib
import sys
import tempfile

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
import hybrid_trt  # noqa: E402
from test_ranges_generic import POINTS, SPATIAL, _Detector  # noqa: E402

device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
options = dict(a.split("=", 1) for a in sys.argv[2:])
torch.manual_seed(0)
model = _Detector().eval().to(device)
with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
    path = hybrid_trt.export(model, (torch.randn(2, 3, 8, 8, device=device),), dynamic_shapes=(SPATIAL,),
                             options=options or None, path=tmp + "/pkg")
    manifest = json.loads((pathlib.Path(path) / "manifest.json").read_text())
    parts = [{"delegate": p["delegate"], "ranges": p.get("ranges"), "per_shape_reason": p.get("per_shape_reason")}
             for p in manifest["partitions"]]
    run = hybrid_trt.load(path)
    errors = {}
    for b, h, w in POINTS:
        x = torch.randn(b, 3, h, w, device=device)
        errors[f"{b}x3x{h}x{w}"] = max(float((g - e).abs().max()) for g, e in zip(run(x), model(x)))
print("RANGE_GENERIC " + json.dumps({"partitions": parts, "max_abs_err": errors}))
