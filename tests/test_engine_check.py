"""engine_check.EngineCheck: the signature a call will ask of each engine-per-shape partition, from the manifest's
size expressions (as torch writes them) and the call's input shapes, without running anything."""
import pytest
import torch

from hybrid_trt.export.engine_check import EngineCheck, Unreadable, _evaluate
import ast

INPUTS = [{"name": "x", "dims": [{"symbol": "s0", "min": 1, "max": 16}, 3, {"symbol": "s1", "min": 8, "max": 64}]}]


def _missing(check, *shape):
    x = torch.empty(*shape)
    return check.missing((tuple(x.shape),), [x])


def _part(name, shapes, sizes, signatures, **kw):
    return {"name": name, "symbolic": True, "ranges": [], "input_shapes": shapes, "size_exprs": sizes,
            "signatures": signatures, **kw}


@pytest.mark.parametrize("text, value", [
    ("4*s0", 20), ("((s1//2))", 16), ("(s1 - 1)//2 + 1", 16), ("Max(1, s0 - 4)", 1), ("FloorDiv(s1, 3)", 10),
    ("ModularIndexing(s1, 2, 4)", 0), ("CeilDiv(s1, 3)", 11), ("Mod(s1, 7)", 4), ("s0**2", 25), ("-s0 + 10", 5),
])
def test_reads_torch_size_expressions(text, value):
    assert _evaluate(ast.parse(text, mode="eval"), {"s0": 5, "s1": 32}) == value


@pytest.mark.parametrize("text", ["__import__('os')", "s0.real", "[s0]", "s0 / 2", "open(s0)", "IntTrueDiv(s0, 2)"])
def test_refuses_anything_else(text):
    with pytest.raises(Unreadable):
        _evaluate(ast.parse(text, mode="eval"), {"s0": 5})


def test_missing_engine_is_found_before_the_call_and_known_ones_pass():
    # The partition sees half the width: widths 32 and 33 need the one engine it has, 34 does not.
    check = EngineCheck(INPUTS, [_part("partition 0", [["s0", 3, "((s1//2))"]], ["2*s0"], ["2x3x16 sizes=[4]"])])
    assert check.active
    assert _missing(check, 2, 3, 32) is None
    assert _missing(check, 2, 3, 33) is None
    assert _missing(check, 2, 3, 34) == ("partition 0", "2x3x17 sizes=[4]")
    assert _missing(check, 3, 3, 32) == ("partition 0", "3x3x16 sizes=[6]")
    assert _missing(check, 3, 3, 32) == ("partition 0", "3x3x16 sizes=[6]")  # remembered


def test_partitions_it_cannot_decide_are_left_to_the_runtime():
    parts = [
        _part("ranged", [["s0", 3, "s1"]], [], [], ranges=["[1..16]x3x[8..64]"]),  # one engine for the range
        _part("static", [[1, 3, 8]], [], ["1x3x8"], symbolic=False),
        _part("data-dependent", [["u0", 4]], [], ["5x4"]),  # a size no input gives
        _part("unknown function", [["Foo(s0)", 4]], [], ["5x4"]),
        {k: v for k, v in _part("old manifest", [["s0", 3]], [], ["1x3"]).items() if k != "size_exprs"},
        _part("a size argument that is not an int", [["s0", 3]], None, ["1x3"]),
    ]
    check = EngineCheck(INPUTS, parts)
    assert not check.active
    assert _missing(check, 7, 3, 9) is None
