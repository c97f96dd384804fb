"""Check of one engine for a dynamic batch range on a ResNet (shape-generic Reshape targets, lowerings/ops/_util.py):
export the export tests' ResNet-18 with the batch dynamic over [1, 8], load it, run batches 1, 3 and 8 (never
listed) against eager, and a batch of 9 must raise EngineNotInPackage. Prints one RANGE_RESNET line.
``python3 scripts/gpu_range_resnet_check.py [cuda|cpu]`` (default cuda: ONNX Runtime's CUDA provider)."""
import json
import pathlib
import sys
import tempfile

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
import hybrid_trt  # noqa: E402
import export_models  # noqa: E402

device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
model, _ = export_models.resnet18()
x = torch.randn(2, 3, 32, 32)  # an example batch of 1 would specialise the batch in torch.export
model = model.to(device)
batch = torch.export.Dim("batch", min=1, max=8)
with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
    path = hybrid_trt.export(model, (x.to(device),), dynamic_shapes=({0: batch},), path=tmp + "/pkg")
    manifest = json.loads((pathlib.Path(path) / "manifest.json").read_text())
    parts = [{"delegate": p["delegate"], "ranges": p.get("ranges"), "per_shape_reason": p.get("per_shape_reason")}
             for p in manifest["partitions"]]
    run = hybrid_trt.load(path)
    errors = {}
    for b in (1, 3, 8):
        inp = torch.randn(b, *x.shape[1:], device=device)
        errors[b] = float((run(inp) - model(inp)).abs().max())
    try:
        run(torch.randn(9, *x.shape[1:], device=device))
        outside = "no error"
    except Exception as e:  # noqa: BLE001
        outside = f"{type(e).__name__}: {str(e)[:160]}"
print("RANGE_RESNET " + json.dumps({"partitions": parts, "max_abs_err": errors, "batch9": outside}))
