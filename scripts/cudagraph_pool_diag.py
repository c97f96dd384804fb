"""GPU diagnostic (H200): which op of the LiDAR example's first CUDA-graph segment returns memory that is not in
the graph's pool ("These storage data ptrs are not allocated in pool ... but should be"). Compiles the example
with CUDA graphs; on that error prints, from Inductor's generated code, the lines that produce each output of the
failing segment. Usage: python scripts/cudagraph_pool_diag.py"""
import re
import sys
import traceback

import torch

sys.path.insert(0, ".")
from examples import lidar_detector  # noqa: E402

import hybrid_trt  # noqa: E402,F401


def main() -> int:
    model = lidar_detector.build_model("small").cuda()
    feats, coords = lidar_detector.make_inputs("small", device="cuda", seed=0)
    with torch.no_grad():
        compiled = torch.compile(model, backend="hybrid_trt", fullgraph=True, mode="reduce-overhead")
        try:
            for seed in range(3):
                feats, coords = lidar_detector.make_inputs("small", device="cuda", seed=seed)
                compiled(feats, coords)
            print("DIAG: no error in 3 calls")
            return 0
        except RuntimeError as e:
            print("DIAG error:", str(e).splitlines()[0])
            tb = e.__traceback__
            generated = None
            while tb is not None:
                name = tb.tb_frame.f_code.co_filename
                if "ind-cache" in name or "torchinductor" in name or re.search(r"/c[a-z0-9]{20,}\.py$", name):
                    generated = name
                tb = tb.tb_next
            print("DIAG generated:", generated)
            if generated is None:
                traceback.print_exc()
                return 1
            src = open(generated).read().splitlines()
            for i, line in enumerate(src):
                if "self.partitions[0]" in line or line.strip().startswith("def partition_0"):
                    print(f"DIAG {i}: {line.strip()[:300]}")
            m = [ln for ln in src if "self.partitions[0]" in ln]
            outs = re.findall(r"buf\d+", m[0].split("=")[0]) if m else []
            print("DIAG segment outputs:", outs)
            for buf in outs:
                for i, line in enumerate(src):
                    if re.match(rf"\s*{buf}\s*=", line) or re.search(rf"\b{buf}\b = ", line):
                        print(f"DIAG {buf} @{i}: {line.strip()[:300]}")
                        for j in range(max(0, i - 3), i):
                            print(f"DIAG    ctx {j}: {src[j].strip()[:200]}")
            return 1


if __name__ == "__main__":
    sys.exit(main())
