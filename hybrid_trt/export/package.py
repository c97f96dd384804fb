"""The package: one directory (or one .zip / .tar file of it) holding everything a target needs to run a model.

Layout::

    manifest.json          what is inside and what it was built with (below)
    model.pt2              the AOTInductor package: the stitched graph, compiled ahead of time
    engines/               an EngineStore (``engines/store.py`` layout) holding every delegated partition's
                           engines, one entry per engine, each with its own meta.json
    reference/case_N.pt    reference inputs and eager outputs, one file per listed input shape

``manifest.json`` holds the format version, the partitions (delegate, content key, engines per input shape),
the input names and listed shapes, every file with its sha256 and size, the environment the engines were
built in (versions of hybrid_trt, torch, onnx, the delegate library and CUDA; GPU architecture or CPU ISA),
the options and the partition report.

Checks (``check_files``, ``check_environment``: ``Check`` rows) each give a verdict and, when they fail, their
own exit code (``EXIT_CODES``), so a tampered engine, a missing file and a version mismatch are told apart by
scripts as well as by people.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import stat
import tarfile
import tempfile
import weakref
import zipfile
import zlib
from typing import Any, Callable, Optional

FORMAT = "hybrid_trt.package"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MANIFEST_DIGEST = "manifest.json.sha256"  # the manifest's own sha256 (it lists every other file's)
AOTI_PACKAGE = "model.pt2"
ENGINES = "engines"
REFERENCE = "reference"
NO_EVICTION = 1 << 62  # the size bound of a package's engine store: its engines are never evicted
# Written by the engine store on use (its mtime is the last use); not content.
_UNTRACKED = frozenset({"last_used"})

# Exit codes of ``hybrid-trt verify`` (and of the checks below); 0 = every check passed.
EXIT_CODES = {
    "manifest": 3,  # not a package, unreadable manifest, unknown format version
    "files": 4,  # a file the manifest lists is missing
    "checksums": 5,  # a file's content differs from the manifest (tampered or damaged)
    "environment": 6,  # versions or GPU architecture of this machine differ from the package's
    "reference": 7,  # the reference inputs do not run, or their outputs differ from the stored ones
    "cuda_graphs": 8,  # verify --cuda-graphs: a reference shape was not captured in a CUDA graph
}


class PackageError(RuntimeError):
    """A package that cannot be used as it is; ``check`` names the failing check (a key of EXIT_CODES)."""

    def __init__(self, message: str, check: str = "manifest"):
        super().__init__(message)
        self.check = check

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.check]


# ---------------------------------------------------------------------------------------------- writing


def sha256_file(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_table(root: pathlib.Path) -> dict[str, dict]:
    """Every file under ``root`` but the manifest (and the store's last-use stamps) -> sha256 and size."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name not in _UNTRACKED \
                and path.relative_to(root).as_posix() not in (MANIFEST, MANIFEST_DIGEST) \
                and "locks" not in path.relative_to(root).parts:
            out[path.relative_to(root).as_posix()] = {"sha256": sha256_file(path), "size": path.stat().st_size}
    return out


def write_manifest(root: pathlib.Path, manifest: dict) -> None:
    data = json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION, **manifest}, indent=1, sort_keys=False,
                      default=str)
    raw = data.encode("utf-8")
    for name, content in ((MANIFEST_DIGEST, hashlib.sha256(raw).hexdigest().encode() + b"\n"), (MANIFEST, raw)):
        tmp = root / (name + ".tmp")
        tmp.write_bytes(content)
        os.replace(tmp, root / name)


def finish(staging: pathlib.Path, path: pathlib.Path) -> pathlib.Path:
    """Publish the staged package directory at ``path``: renamed into place, or archived for .zip/.tar/.tgz."""
    path = pathlib.Path(path)
    kind = archive_kind(path)
    if path.exists():
        _remove(path)
    _usual_modes(staging)
    if kind == "zip":
        tmp = path.with_name(path.name + ".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:  # engines hardly compress; load stays fast
            for f in sorted(staging.rglob("*")):
                if f.is_file():
                    z.write(f, f.relative_to(staging).as_posix())
        os.replace(tmp, path)
        shutil.rmtree(staging, ignore_errors=True)
    elif kind is not None:
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f, _tar_writer(f, path.name, kind) as t:
            for f in sorted(staging.rglob("*")):
                if f.is_file():
                    t.add(f, f.relative_to(staging).as_posix())
        os.replace(tmp, path)
        shutil.rmtree(staging, ignore_errors=True)
    else:
        os.replace(staging, path)
    return path


def _tar_writer(f, name: str, kind: str) -> tarfile.TarFile:
    if kind == "tar.gz":  # gzip's usual level; the file name gzip records is the package's, not the temporary one
        return tarfile.open(name, "w:gz", fileobj=f, compresslevel=6)
    return tarfile.open(fileobj=f, mode="w")


def _usual_modes(staging: pathlib.Path) -> None:
    """Give the staged package the modes mkdir and open give under this umask (0755/0644 with umask 022), for
    the directory published and the members archived alike: mkdtemp made the staging directory 0700, and a
    package its deploying user cannot read fails to load although it is intact."""
    probe = staging / ".mode_probe"
    probe.mkdir()
    dir_mode = stat.S_IMODE(probe.stat().st_mode)  # read, not os.umask(): setting the umask races other threads
    probe.rmdir()
    for p in [staging, *staging.rglob("*")]:
        if not p.is_symlink():
            p.chmod(dir_mode if p.is_dir() else dir_mode & 0o666)


def staging_dir(path: pathlib.Path) -> pathlib.Path:
    """A fresh directory next to ``path`` (same file system, so publishing it is one rename)."""
    path = pathlib.Path(path).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    return pathlib.Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))


# The archives a package is written as, by the path's suffix (any case); any other path is a directory.
ARCHIVE_SUFFIXES = {".zip": "zip", ".tar": "tar", ".tar.gz": "tar.gz", ".tgz": "tar.gz"}
# Archive suffixes not written: refused, rather than a directory named like an archive.
_OTHER_ARCHIVE_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".tbz2", ".txz", ".7z", ".rar")


def archive_kind(path: os.PathLike) -> Optional[str]:
    """"zip", "tar", "tar.gz" for a package path ending in one of ARCHIVE_SUFFIXES (any case), None for a
    directory. Raises PackageError for another archive suffix (.tar.xz, .7z, ...)."""
    kind = _suffix_kind(path)
    if kind is None and pathlib.Path(path).name.lower().endswith(_OTHER_ARCHIVE_SUFFIXES):
        raise PackageError(f"{path}: a package is written as a directory or as a file ending in "
                           f"{', '.join(ARCHIVE_SUFFIXES)}; choose one of these (or a path without an archive suffix "
                           "for a directory)")
    return kind


def _suffix_kind(path: os.PathLike) -> Optional[str]:
    name = pathlib.Path(path).name.lower()
    return next((kind for suffix, kind in ARCHIVE_SUFFIXES.items() if name.endswith(suffix)), None)


def check_replaceable(path: pathlib.Path) -> None:
    """Raise PackageError unless ``path`` is free, an empty directory or a hybrid_trt package (directory, .zip,
    .tar or .tgz), and names a form a package is written as: export replaces only its own output. Checked before
    export starts and again when it publishes."""
    path = pathlib.Path(path)
    archive_kind(path)
    if not path.exists() and not path.is_symlink():
        return
    if path.is_dir() and not path.is_symlink():
        ours = (path / MANIFEST).is_file() or not any(path.iterdir())
    else:
        ours = _archive_holds_manifest(path)
    if not ours:
        raise PackageError(f"{path} exists and is not a hybrid_trt package; refusing to replace it. "
                           "Choose another --out path or remove it.")


def _archive_holds_manifest(path: pathlib.Path) -> bool:
    # Both tests, not the first that answers: zipfile.is_zipfile finds a zip's signature inside a tar of our files
    # too (torch.save writes zips).
    try:
        if tarfile.is_tarfile(path):
            with tarfile.open(path) as t:
                if MANIFEST in t.getnames():
                    return True
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                return MANIFEST in z.namelist()
    except (OSError, zipfile.BadZipFile, tarfile.TarError):
        return False
    return False


def _remove(path: pathlib.Path) -> None:
    check_replaceable(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


# ---------------------------------------------------------------------------------------------- reading


@dataclasses.dataclass
class Package:
    root: pathlib.Path  # the package directory (a temporary extraction for archives)
    manifest: dict
    source: pathlib.Path  # what the user named

    @property
    def aoti_path(self) -> pathlib.Path:
        return self.root / AOTI_PACKAGE

    @property
    def engine_root(self) -> pathlib.Path:
        return self.root / ENGINES


def open_package(path) -> Package:
    """Read a package directory or archive; archives are extracted to a temporary directory that is removed
    when the returned Package is garbage collected (or at exit), or at once when the package does not open.
    An open Package is returned as it is (its archive is not extracted again)."""
    if isinstance(path, Package):
        return path
    source = pathlib.Path(path)
    if not source.exists():
        raise PackageError(f"{source}: no such package (expected a directory or a .zip/.tar/.tgz file written by "
                           "hybrid_trt.export / hybrid-trt export)")
    if not source.is_file():
        return Package(source, read_manifest(source), source)
    root = _extract(source)
    try:
        manifest = read_manifest(root, source)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)  # nothing refers to the extraction yet: no finalizer would run
        raise
    package = Package(root, manifest, source)
    weakref.finalize(package, shutil.rmtree, str(root), True)
    return package


def read_manifest(root: pathlib.Path, source: Optional[pathlib.Path] = None) -> dict:
    """The manifest of the package extracted or stored at ``root``; errors name ``source`` (the archive the user
    gave; default ``root``), never a temporary extraction directory."""
    source = root if source is None else source
    where = _naming(root, source)
    try:
        raw = (root / MANIFEST).read_bytes()
        manifest = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise PackageError(f"{source} has no {MANIFEST}: not a hybrid_trt package (or an incomplete copy)") from None
    except (OSError, ValueError) as e:
        raise PackageError(f"{where(MANIFEST)} is unreadable ({e}); the package is damaged: export it again") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        format_ = manifest.get("format") if isinstance(manifest, dict) else None
        raise PackageError(f"{where(MANIFEST)} is not a hybrid_trt package manifest (format {format_!r})")
    _check_manifest_digest(root, raw, source)
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise PackageError(f"{where(MANIFEST)}: package format version {version!r}, this hybrid_trt reads version "
                           f"{FORMAT_VERSION}; export the model again with this hybrid_trt")
    for field in ("files", "partitions", "environment", "inputs", "reference"):
        if field not in manifest:
            raise PackageError(f"{where(MANIFEST)}: manifest has no {field!r}; the package is damaged: export it again")
    return manifest


def _naming(root: pathlib.Path, source: pathlib.Path) -> Callable[[str], str]:
    """How messages name a file of the package: its path in a directory, ``NAME in ARCHIVE`` in an archive."""
    if root == source:
        return lambda name: str(root / name)
    return lambda name: f"{name} in {source}"


def _check_manifest_digest(root: pathlib.Path, raw: bytes, source: pathlib.Path) -> None:
    """The manifest holds every other file's checksum and what the package returns: its own sha256 sits beside it,
    so an edited or damaged manifest is found like any other file."""
    where = _naming(root, source)
    try:
        digest = (root / MANIFEST_DIGEST).read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise PackageError(f"{source} has no {MANIFEST_DIGEST} (the manifest's checksum): the package is incomplete, "
                           "or was written before packages carried it; export it again", "files") from None
    except (OSError, ValueError) as e:
        raise PackageError(f"{where(MANIFEST_DIGEST)} is unreadable ({e}); export the package again",
                           "files") from None
    if hashlib.sha256(raw).hexdigest() != digest:
        raise PackageError(f"{where(MANIFEST)} does not match its checksum ({MANIFEST_DIGEST}): the manifest was "
                           "changed or damaged; export the package again", "checksums")


def _extract(archive: pathlib.Path) -> pathlib.Path:
    root = pathlib.Path(tempfile.mkdtemp(prefix="hybrid_trt_package_"))
    try:
        # By name first: a tar holding zip files (torch.save, .pt2) can look like a zip to is_zipfile. Any other
        # name (a renamed or differently compressed archive) by content; tarfile reads gzip, bz2 and xz.
        kind = _suffix_kind(archive)
        as_tar = kind in ("tar", "tar.gz") or (kind != "zip" and tarfile.is_tarfile(archive))
        if kind == "zip" and not zipfile.is_zipfile(archive):  # no central directory: cut short or overwritten
            raise PackageError(f"{archive}: not a readable .zip (its zip directory is missing: the file was cut "
                               "short or overwritten); it is damaged: copy or export it again", "checksums")
        if not as_tar and zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as z:
                for name in z.namelist():
                    _check_member(name, archive)
                z.extractall(root)
        elif as_tar:
            with tarfile.open(archive) as t:
                members = t.getmembers()
                for m in members:
                    _check_member(m.name, archive)
                    if not (m.isfile() or m.isdir()):
                        raise PackageError(f"{archive}: member {m.name!r} is not a plain file")
                t.extractall(root, members=members)
        else:
            raise PackageError(f"{archive} is neither a package directory nor a .zip/.tar/.tgz package")
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError) as e:  # EOFError: gzip cut short
        shutil.rmtree(root, ignore_errors=True)
        raise PackageError(f"{archive}: cannot extract the package ({type(e).__name__}: {e}); it is damaged: copy "
                           "or export it again", "checksums") from None
    except PackageError:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root


def _check_member(name: str, archive: pathlib.Path) -> None:
    p = pathlib.PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts:
        raise PackageError(f"{archive}: member {name!r} points outside the package; refusing to extract it")


# ---------------------------------------------------------------------------------------------- checks


@dataclasses.dataclass
class Check:
    name: str  # a key of EXIT_CODES
    passed: Optional[bool]  # None: skipped (an earlier check failed)
    detail: str

    @property
    def exit_code(self) -> int:
        return 0 if self.passed is not False else EXIT_CODES[self.name]

    @property
    def verdict(self) -> str:
        return {True: "PASS", False: "FAIL", None: "SKIP"}[self.passed]


def placed_for_replay(manifest: dict) -> bool:
    """Whether the package was exported for CUDA-graph replay (``export(options={"cuda_graphs": True})``: its
    measured placement timed replays), which ``load`` then does by default. False for a package written before
    this was recorded."""
    return (manifest.get("cuda_graphs") or {}).get("placed_for_replay") is True


def replays_by_default(manifest: dict) -> bool:
    """Whether ``load`` (and ``verify``) replay the package when not told: exported for replay, and export found
    nothing that keeps it from being captured (else it runs uncaptured either way, and saying so at every
    ``verify`` as a failed check would only repeat what export warned about)."""
    return placed_for_replay(manifest) and (manifest.get("cuda_graphs") or {}).get("reasons") == []


def check_files(package: Package, engines_checked_by_store: bool = False) -> list[Check]:
    """Every listed file present (``files``) and matching its checksum (``checksums``).

    ``engines_checked_by_store``: hash only sizes of the files inside engine store entries, whose own
    meta.json (hashed here) lists their sha256, checked by the store as it reads them (load reads each byte
    once)."""
    missing, tampered, ok = [], [], 0
    for name, info in package.manifest["files"].items():
        path = package.root / name
        if not path.is_file():
            missing.append(name)
            continue
        size = path.stat().st_size
        by_store = engines_checked_by_store and name.startswith(ENGINES + "/") and path.name != "meta.json"
        if size != info["size"] or (not by_store and sha256_file(path) != info["sha256"]):
            tampered.append(f"{name} ({size} bytes, manifest says {info['size']}; sha256 differs)"
                            if size != info["size"] else f"{name} (sha256 differs)")
        else:
            ok += 1
    files = Check("files", not missing,
                  f"{len(package.manifest['files']) - len(missing)}/{len(package.manifest['files'])} files present"
                  if not missing else
                  f"missing file(s): {', '.join(missing)}; the package is incomplete: copy it again from its "
                  "source or export it again")
    checksums = Check("checksums", not tampered,
                      f"{ok} file(s) match their sha256" if not tampered else
                      f"file(s) differ from the manifest (tampered or damaged): {'; '.join(tampered)}; "
                      "do not deploy this package: copy it again from its source or export it again")
    return [files, checksums]


def environment_differences(manifest: dict, current: Callable[[str, str], dict]) -> list[str]:
    """``field: package value -> this machine's value`` for every field that differs (per delegate)."""
    diffs = []
    for delegate, env in manifest["environment"].items():
        here = current(delegate, manifest.get("device", "cpu"))
        for field in sorted(set(env) | set(here)):
            if env.get(field) != here.get(field):
                diffs.append(f"{field}: package {env.get(field)!r}, this machine {here.get(field)!r}")
    return list(dict.fromkeys(diffs))


def current_versions(delegates, device) -> dict:
    """Versions of what a package depends on, on this machine: hybrid_trt, torch (AOTInductor code), onnx,
    CUDA and each delegate's library."""
    import onnx
    import torch
    from .. import __version__
    from ..engines.key import environment
    out = {"hybrid_trt": __version__, "torch": torch.__version__, "onnx": onnx.__version__,
           "cuda": str(torch.version.cuda)}
    for delegate in sorted(delegates):
        name, _, version = environment(delegate, device)["library"].partition(" ")
        out[name] = version
    return out


def current_arch(device) -> str:
    """The GPU compute capability of ``device`` ("sm_90"), or "cpu"."""
    import torch
    device = torch.device(device)
    if device.type != "cuda":
        return device.type
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def _differences(label: str, package: dict, here: dict) -> list[str]:
    return [f"{label}{field}: package {package.get(field)!r}, this machine {here.get(field)!r}"
            for field in sorted(set(package) | set(here)) if package.get(field) != here.get(field)]


def missing_ops_text(absent: list[dict]) -> str:
    """What to do about custom ops a package calls that this process has not registered (custom_ops.missing)."""
    ops = "; ".join(f"{op['op']} (defined in module {op['module']})" if op["module"] else op["op"] for op in absent)
    modules = sorted({op["module"] for op in absent if op["module"]})
    how = (f"import {', '.join(modules)} before loading it (hybrid-trt verify/bench: --import MODULE)" if modules
           else "import the library that defines them before loading it")
    return f"its compiled graph calls custom ops this process has not registered: {ops}. {how}"


def version_differences(manifest: dict, device) -> list[str]:
    """The manifest's recorded versions and GPU architecture against this machine's (``field: package ..., this
    machine ...``)."""
    diffs = _differences("", manifest.get("versions", {}), current_versions(manifest["environment"], device))
    return diffs + _differences("", {"gpu_arch": manifest.get("gpu_arch")}, {"gpu_arch": current_arch(device)})


def check_environment(package: Package) -> Check:
    from ..engines.key import environment
    from .custom_ops import missing
    m = package.manifest
    absent = missing(m.get("custom_ops", []))
    if absent:
        return Check("environment", False, missing_ops_text(absent))
    try:
        device = m.get("device", "cpu")
        diffs = version_differences(m, device)
        diffs += [d for d in environment_differences(m, environment) if d not in diffs]
    except Exception as e:  # noqa: BLE001 - e.g. a CUDA package on a machine without a GPU
        return Check("environment", False, f"cannot determine this machine's environment for "
                     f"{package.manifest.get('device')}: {type(e).__name__}: {e}")
    if diffs:
        return Check("environment", False, "version or architecture mismatch: " + "; ".join(diffs) +
                     ". Engines are specific to these; export the package again on a machine like this one "
                     "(or install the versions it was built with)")
    return Check("environment", True, "versions and architecture match: " + _env_summary(package.manifest))


def _env_summary(manifest: dict) -> str:
    parts = []
    for delegate, env in manifest["environment"].items():
        parts.append(f"{delegate}: torch {env.get('torch')}, {env.get('library')}, cuda {env.get('cuda')}, "
                     f"arch {env.get('gpu_arch')}")
    return "; ".join(parts) or "no delegated partitions"


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(jsonable(v) for v in value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
