"""ONNX Runtime's CUDA TopK on rows holding +inf / -inf / NaN and numbers near float32's largest, float16, float32
and float64, k = the whole row and less, smallest and largest first: prints the indices it returns next to a stable
argsort's (a GPU stage; session 24 found the padding with the type's largest number it shows)."""
import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

ROWS = [[2.0, np.inf, -1.0, 2.0, 0.5], [1.0, 1.0, 1.0, -3.0, 7.0], [np.inf, -np.inf, 0.0, np.inf, -np.inf],
        [3.0, 2.0, 1.0, 0.0, -1.0], [2.0, 3.3961e38, -1.0, 2.0, 0.5], [2.0, 3.4028e38, -1.0, -3.3961e38, 0.5]]


def topk_model(dtype, k, largest):
    x = helper.make_tensor_value_info("x", dtype, [len(ROWS), 5])  # rows 5-6: numbers near float32's largest
    v = helper.make_tensor_value_info("v", dtype, None)
    i = helper.make_tensor_value_info("i", TensorProto.INT64, None)
    kk = helper.make_tensor("k", TensorProto.INT64, [1], [k])
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest, sorted=1)
    g = helper.make_graph([node], "g", [x], [v, i], initializer=[kk])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


for np_dtype, onnx_dtype in ((np.float16, TensorProto.FLOAT16), (np.float32, TensorProto.FLOAT),
                            (np.float64, TensorProto.DOUBLE)):
    with np.errstate(over="ignore"):
        data = np.array(ROWS, dtype=np_dtype)  # (rows 5-6 are inf in float16)
    for k in (5, 3):
        for largest in (0, 1):
            s = ort.InferenceSession(topk_model(onnx_dtype, k, largest), providers=["CUDAExecutionProvider"])
            v, i = s.run(None, {"x": data})
            want = np.argsort(-data if largest else data, axis=1, kind="stable")[:, :k]
            bad = [r for r in range(len(ROWS)) if not np.array_equal(np.sort(i[r]), np.sort(want[r]))
                   or (i[r] >= 5).any() or (i[r] < 0).any()]
            print(f"{np_dtype.__name__} k={k} largest={largest}: {'OK' if not bad else 'BAD rows ' + str(bad)}")
            for r in bad:
                print(f"   row {ROWS[r]}: indices {i[r].tolist()} values {v[r].tolist()}; "
                      f"stable argsort {want[r].tolist()}")
