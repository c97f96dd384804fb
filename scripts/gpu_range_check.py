"""H200 check of an engine for a range of shapes on ONNX Runtime's CUDA provider (engines/ranges.py): export the
two-input test model with batches 2 and 4 listed (one range [2..4]), load it, run batch 3 (never listed) and
compare with eager; a batch outside the range must raise. Prints one RANGE line."""
import json
import pathlib
import sys
import tempfile

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
import hybrid_trt  # noqa: E402
import export_models  # noqa: E402

model, (a, b) = export_models.two_inputs()
model = model.cuda()
with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
    path = hybrid_trt.export(model, (a.cuda(), b.cuda()), shapes=[(a.cuda(), b.cuda()),
                             (torch.randn(4, 3, 16, 16).cuda(), torch.randn(4, 6).cuda())], path=tmp + "/pkg")
    manifest = json.loads((pathlib.Path(path) / "manifest.json").read_text())
    ranges = [p.get("ranges") for p in manifest["partitions"]]
    run = hybrid_trt.load(path)
    x, y = torch.randn(3, 3, 16, 16).cuda(), torch.randn(3, 6).cuda()
    got, want = run(x, y), model(x, y)
    flat = lambda o: o if isinstance(o, (tuple, list)) else (o,)  # noqa: E731
    err = max(float((g - w).abs().max()) for g, w in zip(flat(got), flat(want)))
    try:
        run(torch.randn(5, 3, 16, 16).cuda(), torch.randn(5, 6).cuda())
        outside = "no error"
    except Exception as e:  # noqa: BLE001
        outside = f"{type(e).__name__}: {str(e)[:160]}"
print("RANGE " + json.dumps({"ranges": ranges, "max_abs_err_batch3": err, "batch5": outside}))
