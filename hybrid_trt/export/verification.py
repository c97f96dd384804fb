"""``hybrid_trt.verify(path)`` (``hybrid-trt verify``): every check of a package on this machine, in order:
manifest, files, checksums, environment, reference outputs and, for a package exported for CUDA graphs, whether
each reference shape was captured. Each check is a ``package.Check`` with its exit code."""
from __future__ import annotations

from typing import Callable, Optional

import torch

from .api import flat_outputs
from .deploy import load
from .package import Check, PackageError, check_environment, check_files, open_package, replays_by_default
from .reference_check import DEFAULT_ATOL, DEFAULT_RTOL, ComparisonError, OutputCheck


def verify(path, cuda_graphs: Optional[bool] = None, compare: Optional[Callable] = None) -> list:
    """Every check of a package, in order: manifest, files, checksums, environment, reference; with
    ``cuda_graphs`` (None: as the package was exported for), the reference inputs run as
    ``load(cuda_graphs=True)`` runs them (each shape's uncaptured first call, its capture, a replay: every output
    checked), then whether each shape was captured. ``compare``: the comparison the package was exported with
    (``export(compare=...)``); a package exported with one fails its reference check without it."""
    try:
        package = open_package(path)
    except PackageError as e:  # its check: the manifest itself, or its checksum file (missing or not matching)
        return [Check(e.check, False, str(e))]
    if cuda_graphs is None:
        cuda_graphs = replays_by_default(package.manifest)
    checks = [Check("manifest", True, f"format {package.manifest['format_version']}, "
                    f"{len(package.manifest['partitions'])} partition(s), {len(package.manifest['files'])} files")]
    checks += check_files(package)
    checks.append(check_environment(package))
    if not all(c.passed for c in checks[1:3]):
        checks.append(Check("reference", None, "not run: the package's files are not intact"))
        if cuda_graphs:
            checks.append(Check("cuda_graphs", None, "not run: the package's files are not intact"))
    else:
        checks += _check_reference(package, cuda_graphs, compare)
    return checks


def _check_reference(package, cuda_graphs: bool, compare: Optional[Callable]) -> list:
    m = package.manifest
    graphs_not_run = [Check("cuda_graphs", None, "not run: the reference check failed")] if cuda_graphs else []
    tol = m.get("tolerance", {})
    check = OutputCheck(tol.get("rtol", DEFAULT_RTOL), tol.get("atol", DEFAULT_ATOL), compare)
    recorded = tol.get("compare")
    if not check.same_function_as(recorded):  # the package's own check, not one the verifier picks
        what = (f"the package was exported with the comparison {recorded}, which its outputs need instead of "
                f"rtol/atol; give it: hybrid-trt verify PATH --compare {recorded} (python: "
                "hybrid_trt.verify(path, compare=...))" if recorded and compare is None else
                f"the package was exported with the comparison {recorded}, not {check.compare_name}" if recorded
                else f"the package was exported with rtol/atol, not a comparison; verify it without --compare "
                     f"({check.compare_name})")
        return [Check("reference", False, what)] + graphs_not_run
    try:
        # the package opened here: not extracted again, and errors name its source
        model = load(package, cuda_graphs=cuda_graphs)
    except Exception as e:  # noqa: BLE001 - reported as this check's verdict
        return [Check("reference", False, f"the package does not load: {type(e).__name__}: {e}")] + graphs_not_run
    runs = ("first call", "capture", "replay") if cuda_graphs else ("call",)
    for ref in m["reference"]:
        data = torch.load(package.root / ref["file"], weights_only=True)
        inputs = [t.to(model.device) for t in data["inputs"]]
        for run in runs:
            case = f"input shapes {ref['input_shapes']}" + (f" ({run})" if cuda_graphs else "")
            try:
                with torch.no_grad():
                    got = flat_outputs(model(*inputs))
            except Exception as e:  # noqa: BLE001
                return [Check("reference", False, f"{case} fail to run: {type(e).__name__}: {e}")] + graphs_not_run
            try:
                problem = check.problem(got, data["outputs"])
            except ComparisonError as e:  # the user's comparison: reported as this check's verdict
                return [Check("reference", False, f"{case}: {e}")] + graphs_not_run
            if problem:
                return [Check("reference", False, f"{case}: outputs differ from the stored ones: {problem}. The "
                              "engines or this machine compute differently: do not deploy; export again on a "
                              "machine like this one")] + graphs_not_run
    record = model.cuda_graphs if cuda_graphs else None
    captured = record is not None and record.status.startswith("captured whole") and not record.reasons
    calls = (", each uncaptured, captured and replayed" if captured else
             f", each called {len(runs)} times, uncaptured" if cuda_graphs else "")
    checks = [Check("reference", True, f"{len(m['reference'])} reference case(s) match ({check.describe()}){calls}")]
    if cuda_graphs:
        checks.append(Check("cuda_graphs", captured, record.status + (f": {'; '.join(record.reasons)}"
                                                                      if record.reasons else "")))
    return checks
