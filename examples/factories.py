"""Factories for the ``hybrid-trt`` command line: ``MODULE:FACTORY`` names a function that takes no arguments and
returns ``(model, example_inputs)``, e.g. ``hybrid-trt export examples.factories:detector --out detector.pkg``.
``compare_detector`` is the detector's comparison for ``--compare`` (export and verify)."""
from examples.detections import compare_at_cutoff
from examples.models import build


def resnet18():
    return build("resnet18")


def detector():
    return build("detector")


def transformer():
    return build("transformer")


def compare_detector(got, expected):
    """The detector's (boxes, scores, classes) against eager's, detection by detection: in float16 on a GPU its
    top-k orders near-equal peaks otherwise than eager, so element-wise tolerances fail on right boxes. Raises
    AssertionError on a mismatch. Tolerances for float16: scores within 5e-3 absolute and 1e-3 relative, boxes
    within ten times that (0.05 + 1% of each field); only a detection tied with the cut-off may have no partner."""
    compare_at_cutoff(got, expected, atol=5e-3, rtol=1e-3)
