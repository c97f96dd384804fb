"""The package format and its checks, on packages with stand-in engine files (fast; no model is exported).

The round trips with real engines and AOTInductor are in test_export.py."""
import json
import os
import pathlib
import re
import shutil
import stat
import sys
import tarfile
import tempfile
import zipfile

import pytest
import torch

import export_models
import hybrid_trt

from hybrid_trt.engines.key import environment
from hybrid_trt.export import cli
from hybrid_trt.export import package as pkg

KEY = "ab" + "0" * 62


def _write_package(root: pathlib.Path) -> pathlib.Path:
    entry = root / pkg.ENGINES / "v1" / KEY[:2] / KEY
    entry.mkdir(parents=True)
    (entry / "engine.model.onnx").write_bytes(bytes(range(256)) * 40)
    (entry / "recipe.pt").write_bytes(b"recipe" * 100)
    (entry / "meta.json").write_text(json.dumps({"key": KEY}))
    (entry / "last_used").write_bytes(b"")
    (root / pkg.AOTI_PACKAGE).write_bytes(b"aoti" * 1000)
    (root / pkg.REFERENCE).mkdir()
    torch.save({"inputs": [torch.ones(2)], "outputs": [torch.ones(2)]}, root / pkg.REFERENCE / "case_0.pt")
    manifest = {
        "device": "cpu",
        "versions": pkg.current_versions(["onnxruntime"], "cpu"),
        "gpu_arch": pkg.current_arch("cpu"),
        "environment": {"onnxruntime": environment("onnxruntime", "cpu")},
        "inputs": [{"name": "x", "dtype": "float32", "dynamic_dims": []}],
        "shapes": [[[2]]],
        "partitions": [{"index": 0, "name": "partition 0", "delegate": "onnxruntime", "key": KEY,
                        "symbolic": False, "op_count": 3, "signatures": ["2"],
                        "engines": [{"kind": "static", "signature": "2", "entry": f"engines/v1/{KEY[:2]}/{KEY}",
                                     "files": ["engine.model.onnx", "recipe.pt"], "bytes": 10840}]}],
        "reference": [{"file": "reference/case_0.pt", "input_shapes": [[2]]}],
    }
    manifest["files"] = pkg.file_table(root)
    pkg.write_manifest(root, manifest)
    return root


@pytest.fixture
def package(tmp_path):
    return _write_package(tmp_path / "pkg")


def _engine(root: pathlib.Path) -> pathlib.Path:
    return root / pkg.ENGINES / "v1" / KEY[:2] / KEY / "engine.model.onnx"


def test_intact_package_passes_file_and_environment_checks(package):
    p = pkg.open_package(package)
    files, checksums = pkg.check_files(p)
    assert files.passed and checksums.passed, (files.detail, checksums.detail)
    assert "last_used" not in "".join(p.manifest["files"])  # the store's use stamp is not content
    assert pkg.check_environment(p).passed


def test_flipped_byte_is_a_checksum_failure(package):
    data = bytearray(_engine(package).read_bytes())
    data[100] ^= 0x01
    _engine(package).write_bytes(bytes(data))
    files, checksums = pkg.check_files(pkg.open_package(package))
    assert files.passed
    assert checksums.passed is False and checksums.exit_code == pkg.EXIT_CODES["checksums"]
    assert "engine.model.onnx" in checksums.detail and "tampered" in checksums.detail


def test_missing_engine_is_a_missing_file_failure(package):
    _engine(package).unlink()
    files, checksums = pkg.check_files(pkg.open_package(package))
    assert files.passed is False and files.exit_code == pkg.EXIT_CODES["files"]
    assert "missing" in files.detail and "engine.model.onnx" in files.detail
    assert checksums.passed  # the remaining files are intact


def test_edited_versions_are_an_environment_failure(package):
    manifest = json.loads((package / pkg.MANIFEST).read_text())
    manifest["environment"]["onnxruntime"]["torch"] = "2.0.0"
    pkg.write_manifest(package, manifest)  # re-signed: the environment check is under test
    check = pkg.check_environment(pkg.open_package(package))
    assert check.passed is False and check.exit_code == pkg.EXIT_CODES["environment"]
    assert "torch: package '2.0.0', this machine" in check.detail


@pytest.mark.parametrize("field,value", [("onnxruntime", "0.0.1"), ("torch", "2.0.0"), ("cuda", "99.0")])
def test_edited_versions_section_is_an_environment_failure(package, field, value):
    manifest = json.loads((package / pkg.MANIFEST).read_text())
    manifest["versions"][field] = value
    pkg.write_manifest(package, manifest)  # re-signed: the environment check is under test
    check = pkg.check_environment(pkg.open_package(package))
    assert check.passed is False and f"{field}: package {value!r}, this machine" in check.detail


def test_other_gpu_architecture_is_an_environment_failure(package):
    manifest = json.loads((package / pkg.MANIFEST).read_text())
    manifest["gpu_arch"] = "sm_90"
    pkg.write_manifest(package, manifest)  # re-signed: the environment check is under test
    check = pkg.check_environment(pkg.open_package(package))
    assert check.passed is False and "gpu_arch: package 'sm_90', this machine 'cpu'" in check.detail


def test_verify_command_exit_codes_differ_per_failure(package, capsys):
    # The reference run needs a real package (test_export.py); stop before it by breaking the files.
    _engine(package).unlink()
    assert cli.main(["verify", str(package)]) == pkg.EXIT_CODES["files"]
    out = capsys.readouterr().out
    assert "FAIL  files" in out and "SKIP  reference" in out and "exit code 4" in out
    assert cli.main(["verify", str(package / "nowhere")]) == pkg.EXIT_CODES["manifest"]
    assert "no such package" in capsys.readouterr().out


@pytest.mark.parametrize("suffix", [".zip", ".tar", ".ZIP", ".Tar", ".tgz", ".tar.gz", ".TGZ"])
def test_single_file_packages_open_like_directories(tmp_path, suffix):
    """.ZIP, .TAR, .tgz and .tar.gz were written as directories of that name (the suffix was matched exactly)."""
    staging = _write_package(tmp_path / "staging")
    archive = pkg.finish(staging, tmp_path / f"model{suffix}")
    assert archive.is_file() and not staging.exists()
    if suffix.lower() in (".tgz", ".tar.gz"):
        with tarfile.open(archive, "r:gz") as t:
            assert pkg.MANIFEST in t.getnames()
    p = pkg.open_package(archive)
    assert p.root != archive and all(c.passed for c in pkg.check_files(p))
    root = p.root
    del p  # the extraction is temporary
    import gc
    gc.collect()
    assert not root.exists()


def _archive_with(tmp_path, suffix: str, edit) -> pathlib.Path:
    """A package archive whose staged files ``edit`` changed first (a package copied and edited by hand)."""
    staging = _write_package(tmp_path / "staging")
    edit(staging)
    return pkg.finish(staging, tmp_path / f"model{suffix}")


def _flip_manifest_byte(root):
    raw = bytearray((root / pkg.MANIFEST).read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (root / pkg.MANIFEST).write_bytes(bytes(raw))


@pytest.mark.parametrize("suffix", [".zip", ".tar"])
@pytest.mark.parametrize("edit,match", [
    (_flip_manifest_byte, "manifest.json in {archive} does not match its checksum"),
    (lambda root: (root / pkg.MANIFEST).unlink(), "{archive} has no manifest.json"),
    (lambda root: (root / pkg.MANIFEST_DIGEST).unlink(), "{archive} has no manifest.json.sha256"),
    (lambda root: (root / pkg.MANIFEST).write_text("{"), "manifest.json in {archive} is unreadable"),
])
def test_an_archive_that_does_not_open_is_named_and_its_extraction_removed(tmp_path, monkeypatch, suffix, edit,
                                                                           match):
    """The error named the temporary extraction directory instead of the archive the user gave, and that directory
    was left behind (its cleanup was registered only after the manifest was read)."""
    archive = _archive_with(tmp_path, suffix, edit)
    extractions = tmp_path / "tmp"
    extractions.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(extractions))
    with pytest.raises(pkg.PackageError, match=re.escape(match.format(archive=archive))) as e:
        pkg.open_package(archive)
    assert "hybrid_trt_package_" not in str(e.value)
    assert list(extractions.iterdir()) == []


def test_verify_of_an_archive_names_the_archive_in_every_verdict(tmp_path, capsys):
    """verify loaded the extraction directory (load(package.root)): the reference check's error named it, and the
    archive was extracted a second time."""
    archive = _archive_with(tmp_path, ".zip", lambda root: None)
    cli.main(["verify", str(archive)])  # the stand-in engine does not load: the reference check fails, naming ...
    out = capsys.readouterr().out
    assert f"FAIL  reference    the package does not load: PackageError: hybrid_trt package {archive}:" in out
    assert "hybrid_trt_package_" not in out
    archive = _archive_with(tmp_path / "edited", ".zip", _flip_manifest_byte)
    assert cli.main(["verify", str(archive)]) == pkg.EXIT_CODES["checksums"]
    assert f"FAIL  checksums    manifest.json in {archive} does not match" in capsys.readouterr().out


@pytest.fixture(params=[0o022, 0o027], ids=["umask022", "umask027"])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _member_modes(archive: pathlib.Path) -> set:
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as z:
            return {i.external_attr >> 16 & 0o7777 for i in z.infolist()}
    with tarfile.open(archive) as t:
        return {m.mode for m in t.getmembers()}


@pytest.mark.parametrize("suffix", ["", ".zip", ".tar"])
def test_packages_get_the_usual_modes_for_the_umask(tmp_path, umask, suffix):
    """A directory package was published 0700 (its staging directory came from mkdtemp), whatever the umask:
    the user that deploys it could not read it. Now as mkdir and open would make them: 0755/0644 under umask
    022, in a directory or an archive, a file written private (0600) included."""
    target = tmp_path / f"model{suffix}"
    staging = _write_package(pkg.staging_dir(target))
    (staging / pkg.REFERENCE / "case_0.pt").chmod(0o600)
    written = pkg.finish(staging, target)
    dir_mode, file_mode = 0o777 & ~umask, 0o666 & ~umask
    if suffix:
        assert stat.S_IMODE(written.stat().st_mode) == file_mode
        assert _member_modes(written) == {file_mode}
    else:
        paths = [written, *written.rglob("*")]
        assert {stat.S_IMODE(p.stat().st_mode) for p in paths if p.is_dir()} == {dir_mode}
        assert {stat.S_IMODE(p.stat().st_mode) for p in paths if p.is_file()} == {file_mode}


@pytest.mark.parametrize("name", ["model.tar.xz", "model.7z", "model.GZ"])
def test_an_archive_suffix_no_package_is_written_as_is_refused(tmp_path, capsys, name):
    """Was written as a directory named like an archive; now refused, naming the suffixes that are written (the
    command: a usage error, before the model is built)."""
    with pytest.raises(pkg.PackageError, match=r"ending in \.zip, \.tar, \.tar\.gz, \.tgz; choose one"):
        pkg.check_replaceable(tmp_path / name)
    out = tmp_path / name
    assert cli.main(["export", "no_such_module:factory", "--out", str(out)]) == cli.EXIT_USAGE
    assert f"--out {out}: a package is written as a directory or as a file ending in" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("name", ["model.tar.xz", "data"])
def test_export_refuses_a_path_it_will_not_write_with_its_own_error(tmp_path, name):
    """hybrid_trt.export documents ExportError; a path it will not write (another archive suffix, a directory that
    is not a package) raised the package module's PackageError. Refused before any work, the directory kept."""
    out = tmp_path / name
    if name == "data":
        out.mkdir()
        (out / "precious.txt").write_text("keep")
    with pytest.raises(hybrid_trt.ExportError, match="hybrid_trt.export: .*(ending in|not a hybrid_trt package)"):
        hybrid_trt.export(torch.nn.ReLU(), (torch.ones(2),), path=out)
    assert name != "data" or (out / "precious.txt").read_text() == "keep"
    assert not (tmp_path / "model.tar.xz").exists()


def test_the_loaded_models_type_and_exit_codes_are_named_at_the_top_level():
    """The README names them as hybrid_trt.DeployedModel and hybrid_trt.EXIT_CODES (hybrid_trt.export is the
    function, so hybrid_trt.export.DeployedModel is no attribute)."""
    from hybrid_trt.export import deploy
    assert hybrid_trt.DeployedModel is deploy.DeployedModel and hybrid_trt.EXIT_CODES is pkg.EXIT_CODES


def test_an_out_path_export_would_refuse_is_a_usage_error(tmp_path, capsys):
    """An existing directory that is not a package, or an empty --out, exited 1 after the model was built (the
    directory shown as "."); both are usage errors now (exit 2), before the factory runs."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "precious.txt").write_text("keep")
    for out, match in ((tmp_path / "data", "exists and is not a hybrid_trt package"), ("", "--out is empty")):
        assert cli.main(["export", "no_such_module:factory", "--out", str(out)]) == cli.EXIT_USAGE
        assert match in capsys.readouterr().err
    assert (tmp_path / "data" / "precious.txt").read_text() == "keep"


def test_archive_member_outside_the_package_is_refused(tmp_path):
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("../escape.txt", "x")
    with pytest.raises(pkg.PackageError, match="outside the package"):
        pkg.open_package(bad)


def test_manifest_problems_name_what_to_do(tmp_path, package):
    with pytest.raises(pkg.PackageError, match="no manifest.json: not a hybrid_trt package"):
        pkg.open_package(tmp_path)
    manifest = json.loads((package / pkg.MANIFEST).read_text())
    manifest["format_version"] = 99
    pkg.write_manifest(package, manifest)  # with its checksum: the version check is what is under test
    with pytest.raises(pkg.PackageError, match="format version 99.*export the model again"):
        pkg.open_package(package)


def test_an_edited_manifest_fails_its_checksum(package):
    """The manifest lists every other file's checksum and what the package returns (output names, tolerances): a
    one-byte edit passed verify and load before; now it fails the manifest's own checksum (exit code 5)."""
    path = package / pkg.MANIFEST
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(pkg.PackageError, match="does not match its checksum") as e:
        pkg.open_package(package)
    assert e.value.exit_code == pkg.EXIT_CODES["checksums"] == 5
    (package / pkg.MANIFEST_DIGEST).unlink()
    with pytest.raises(pkg.PackageError, match="no manifest.json.sha256") as e:
        pkg.open_package(package)
    assert e.value.exit_code == pkg.EXIT_CODES["files"]


def test_publishing_never_replaces_a_directory_that_is_not_a_package(tmp_path):
    target = tmp_path / "data"
    target.mkdir()
    (target / "precious.txt").write_text("keep")
    staging = _write_package(tmp_path / "staging")
    with pytest.raises(pkg.PackageError, match="not a hybrid_trt package; refusing"):
        pkg.finish(staging, target)
    assert (target / "precious.txt").read_text() == "keep"
    shutil.rmtree(staging)


@pytest.mark.parametrize("name", ["data.zip", "data.tar", "data"])
def test_publishing_never_replaces_a_file_that_is_not_a_package(tmp_path, name):
    """A file at the package path (a user's own archive or data) was overwritten without a check; now it is
    refused like a directory, while a package archive of our own is replaced."""
    target = tmp_path / name
    target.write_text("user data")
    staging = _write_package(tmp_path / "staging")
    with pytest.raises(pkg.PackageError, match="not a hybrid_trt package; refusing"):
        pkg.finish(staging, target)
    assert target.read_text() == "user data"
    if name != "data":
        target.unlink()
        pkg.finish(staging, target)  # our own archive ...
        pkg.finish(_write_package(tmp_path / "staging2"), target)  # ... is replaced by the next export
        pkg.open_package(target)
    else:
        shutil.rmtree(staging)


def test_cli_argument_parsing():
    assert cli.parse_shape("x=1x3x224x224") == {"x": (1, 3, 224, 224)}
    assert cli.parse_shape("a=2x3,b=4") == {"a": (2, 3), "b": (4,)}
    assert [(d.name, d.dim, d.symbol, d.bounds) for d in cli.parse_dynamic(["x:0=1:8", "y:1", "z:0=b:2:4", "w:2=b"])] \
        == [("x", 0, None, (1, 8)), ("y", 1, None, None), ("z", 0, "b", (2, 4)), ("w", 2, "b", None)]
    for bad in ("x", "x=1xa", "=1x2"):
        with pytest.raises(cli.UsageError, match="--shape"):
            cli.parse_shape(bad)
    with pytest.raises(cli.UsageError, match="--dynamic"):
        cli.parse_dynamic(["x:a"])
    with pytest.raises(cli.UsageError, match="unknown hybrid_trt option"):
        cli.parse_options(["no_such_option=1"])
    with pytest.raises(cli.UsageError, match="MODULE:FACTORY"):
        cli.load_factory("no_colon")


@pytest.mark.parametrize("argv,match", [
    (["--dynamic", "image:0=8:1"], r"--dynamic 'image:0=8:1': the range 8:1 is empty"),
    (["--dynamic", "image:0=2:2"], r"--dynamic 'image:0=2:2': the range 2:2 is empty"),
    (["--dynamic", "image:-1=1:4"], r"--dynamic 'image:-1=1:4': DIM -1 is negative"),
    (["--dynamic", "image:7=1:4"], r"--dynamic 'image:7=1:4': input 'image' has 4 dimension\(s\), numbered 0 to 3"),
    (["--dynamic", "nosuch:0=1:4"], r"--dynamic 'nosuch:0=1:4' names unknown input 'nosuch'"),
    (["--dynamic", "image:0=1:4", "--dynamic", "image:0=1:8"], r"name one dimension twice, differently"),
    (["--dynamic", "image:0=3:4"], r"gives input 'image' dimension 0 the size 2, outside 3..4"),
    (["--shape", "nosuch=2x3x16x16"], r"--shape names unknown input\(s\) \['nosuch'\]"),
    (["--shape", "image=2x3x16"], r"--shape image=2x3x16: 3 dimensions; input 'image' has 4"),
    (["--shape", "image=-2x3x16x16"], r"--shape 'image=-2x3x16x16': a size is negative"),  # was exit 1
])
def test_bad_shape_and_dynamic_arguments_are_usage_errors(tmp_path, capsys, argv, match):
    """Were a raw AssertionError traceback (min > max), torch.export's IndexError or exit code 1 (unknown --shape
    input); now one line naming the argument, exit code 2, before anything is built."""
    out = tmp_path / "p.pkg"
    assert cli.main(["export", "export_models:two_inputs", "--out", str(out), "--quiet", *argv]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("hybrid-trt export: error: "), err
    assert re.search(match, err), err
    assert not out.exists()


def _cli_dynamic_shapes(argv: list[str], shapes=()):
    """What ``hybrid-trt export export_models:two_inputs --dynamic ... --shape ...`` passes to torch.export."""
    model, example = export_models.two_inputs()
    listed = cli.listed_shapes([cli.parse_shape(s) for s in shapes], ["image", "features"], example)
    return model, example, cli._dynamic_spec(cli.parse_dynamic(argv), ["image", "features"], listed)


@pytest.mark.parametrize("argv,shapes,expected", [
    (["image:0=batch:1:4", "features:0=batch"], (), (1, 4)),  # the range given once ...
    (["image:0=batch:1:4", "features:0=batch:1:4"], (), (1, 4)),  # ... or equally twice
    (["image:0=batch", "features:0=batch"], ("image=2x3x16x16,features=2x6", "image=5x3x16x16,features=5x6"),
     (2, 5)),  # or the listed sizes' range
])
def test_dynamic_dimensions_tied_by_one_symbol_are_one_dim(argv, shapes, expected):
    """Each --dynamic was a Dim of its own: a model whose inputs share the batch failed in torch.export
    ('features_0 = image_0') with no way to say so on the command line. One SYMBOL is one Dim now."""
    model, example, spec = _cli_dynamic_shapes(argv, shapes)
    assert spec[0][0] is spec[1][0] and spec[0][0].__name__ == "batch"
    assert (spec[0][0].min, spec[0][0].max) == expected
    program = torch.export.export(model, example, dynamic_shapes=spec, strict=False)  # the step that failed
    image, features = (n.meta["val"] for n in program.graph.nodes if n.op == "placeholder"
                       and n.name in ("image", "features"))
    assert image.shape[0] == features.shape[0] and not isinstance(image.shape[0], int)


def test_a_dynamic_dimension_without_a_range_takes_the_listed_sizes_range():
    """``--dynamic image:0`` became Dim.DYNAMIC, which export always refused (no upper bound) even with --shape
    listing the sizes; it is now the listed sizes' range, as the help said ("range inferred")."""
    _, _, spec = _cli_dynamic_shapes(["image:0"], ("image=2x3x16x16", "image=5x3x16x16"))
    assert (spec[0][0].min, spec[0][0].max) == (2, 5) and spec[1] is None


@pytest.mark.parametrize("argv,shapes,match", [
    (["image:0=batch:1:4", "features:0=batch:1:8"], (), r"give 'batch' two ranges; give its range once"),
    (["image:0=batch", "features:0=batch"], (), r"gives no range, and the listed sizes of 'batch' are all 2"),
    (["image:0"], (), r"'image:0' gives no range, and the listed sizes of input 'image' dimension 0 are all 2"),
    (["image:0=batch:1:4", "features:0=batch"], ("image=2x3x16x16,features=3x6",),
     r"ties image:0 and features:0 \(symbol 'batch'\), but .* sizes image:0=2, features:0=3"),
    (["image:0=batch:3:4", "features:0=batch"], (), r"gives 'batch' the size 2, outside 3..4"),
    (["image:0=batch:1:4", "image:0=1:4"], (), r"name one dimension twice, differently"),
])
def test_tied_dimensions_that_cannot_be_one_dim_are_usage_errors(argv, shapes, match):
    with pytest.raises(cli.UsageError, match=match):
        _cli_dynamic_shapes(argv, shapes)


def test_dims_torch_export_finds_equal_get_the_command_line_that_ties_them(capsys):
    """Untied, the shared batch fails in torch.export (exit 1); the error now ends with the arguments to give."""
    model, example, spec = _cli_dynamic_shapes(["image:0=1:4", "features:0=1:4"])
    with pytest.raises(Exception, match="must always be equal") as e:
        torch.export.export(model, example, dynamic_shapes=spec, strict=False)
    hint = cli._tie_hint(str(e.value), cli.parse_dynamic(["image:0=1:4", "features:0=1:4"]))
    assert re.search(r"tie them with one SYMBOL, e.g. --dynamic (features|image):0=batch:1:4 "
                     r"--dynamic (image|features):0=batch", hint), hint


def test_a_batch_1_example_with_untied_dims_gets_the_tie_not_pin_to_1(tmp_path):
    """With a batch-1 example, export traces the size-1 dims at size 2, fails there on the tie, and tries the example
    as given, which fails on the size-1 specialisation: that second error was reported, advising to pin both dims
    to 1 ('image_0 = 1'). The tiled trace's error, which names the tie, is reported now."""
    from torch.export import Dim
    model, (image, features) = export_models.two_inputs()
    with pytest.raises(hybrid_trt.ExportError, match="must always be equal") as e:
        hybrid_trt.export(model, (image[:1], features[:1]), path=tmp_path / "p",
                          dynamic_shapes=({0: Dim("b", max=4)}, {0: Dim("c", max=4)}))
    assert "specialized it to be a constant" not in str(e.value) and not (tmp_path / "p").exists()


@pytest.mark.parametrize("spec,shapes,match", [
    (({0: "b4"}, {0: "b4"}), [{"image": (8, 3, 16, 16), "features": (8, 6)}],
     r"input 'image' dimension 0 the size 8, outside the range 0\.\.4 of its Dim 'b4'"),
    (({0: "b4"}, {0: "b4"}),
     [{"image": (2, 3, 16, 16), "features": (2, 6)}, {"image": (2, 3, 32, 32), "features": (2, 6)}],
     r"input 'image' dimension 2 the sizes \[16, 32\], and dynamic_shapes leaves it static"),
])
def test_listed_shapes_outside_the_given_dynamic_shapes_name_the_input(tmp_path, spec, shapes, match):
    """torch.export's "ConstraintViolationError: 8 not in range [2, 4]" was all the Python API said (the command line
    checks its own --dynamic ranges); refused now before any work, naming the input, dimension and range."""
    from torch.export import Dim
    b4 = Dim("b4", max=4)
    model, example = export_models.two_inputs()
    dynamic = tuple({d: b4 for d in s} for s in spec)
    with pytest.raises(hybrid_trt.ExportError, match=match):
        hybrid_trt.export(model, example, path=tmp_path / "p", shapes=shapes, dynamic_shapes=dynamic)
    assert not (tmp_path / "p").exists()


def test_tie_hint_names_nested_inputs_as_given(tmp_path, capsys):
    """Nested inputs' Dims are named after sanitized leaf names ("batch_image_0"); the hint read them back as
    "batch_image:0", an input that does not exist. It names the arguments as given now."""
    argv = ["--dynamic", "batch.image:0=1:4", "--dynamic", "batch.points:0=1:4"]
    assert cli.main(["export", "export_models:multimodal", "--out", str(tmp_path / "p"), "--quiet", *argv]) \
        == cli.EXIT_FAILED
    err = capsys.readouterr().err
    assert re.search(r"tie them with one SYMBOL, e.g. --dynamic batch\.(image|points):0=batch:1:4 "
                     r"--dynamic batch\.(points|image):0=batch", err), err
    arguments = cli.parse_dynamic(argv[1::2])
    assert cli._tie_hint("The values of other_0 = s1 and other_1 = s2 must always be equal", arguments) == ""


def test_factory_errors_say_what_is_wrong(tmp_path, monkeypatch):
    """A non-callable attribute was reported as missing, and a factory that raised gave a raw traceback."""
    (tmp_path / "user_factories.py").write_text(
        "not_a_model = 5\n"
        "def broken():\n    raise RuntimeError('factory boom')\n"
        "def one_thing():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, match in (("missing", "has no function 'missing'"), ("not_a_model", "is a int, not a function"),
                        ("broken", r"broken\(\) raised RuntimeError: factory boom"),
                        ("one_thing", r"must return \(model, example_inputs\)")):
        with pytest.raises(cli.UsageError, match=match):
            cli.load_factory(f"user_factories:{name}")


def test_a_factory_file_imports_as_python_imports_a_script(tmp_path, monkeypatch):
    """A factory given as a .py path could not import a file beside it; a file named like another module (onnx.py)
    replaced that module in sys.modules, and export then failed far away; an error while importing the file gave a
    raw traceback (exit 1). Now: its folder is on the path, a clashing name is refused, an import error is a usage
    error naming it."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    folder = tmp_path / "factories_here"
    folder.mkdir()
    (folder / "helper_beside_factory.py").write_text("import torch\nSCALE = 3.0\n")
    (folder / "uses_helper.py").write_text(
        "import torch\nimport helper_beside_factory\n"
        "def make():\n    return torch.nn.ReLU(), (torch.ones(2) * helper_beside_factory.SCALE,)\n")
    (folder / "onnx.py").write_text("def make():\n    return None\n")
    (folder / "broken_on_import.py").write_text("def make(:\n")
    monkeypatch.delitem(sys.modules, "uses_helper", raising=False)
    model, (x,) = cli.load_factory(f"{folder / 'uses_helper.py'}:make")
    assert float(x[0]) == 3.0
    import onnx
    with pytest.raises(cli.UsageError, match=r"'onnx' is the name of another module .*rename the file"):
        cli.load_factory(f"{folder / 'onnx.py'}:make")
    assert sys.modules["onnx"] is onnx
    with pytest.raises(cli.UsageError, match=r"importing .*broken_on_import.py' raised SyntaxError"):
        cli.load_factory(f"{folder / 'broken_on_import.py'}:make")
    assert "broken_on_import" not in sys.modules


@pytest.mark.parametrize("name", ["resnet18", "detector", "transformer"])
def test_the_documented_example_factories_return_a_model_and_its_inputs(name):
    model, example = cli.load_factory(f"examples.factories:{name}")
    assert isinstance(model, torch.nn.Module) and not model.training  # exported as it is deployed: eval mode
    with torch.no_grad():
        leaves = torch.utils._pytree.tree_leaves(model(*example) if isinstance(example, tuple) else model(example))
    assert leaves and all(isinstance(t, torch.Tensor) and t.is_floating_point() <= bool(torch.isfinite(t).all())
                          for t in leaves), name


def test_every_command_has_help(capsys):
    for command in ([], ["export"], ["inspect"], ["verify"], ["bench"]):
        with pytest.raises(SystemExit) as e:
            cli.main(command + ["--help"])
        assert e.value.code == 0
        assert "usage: hybrid-trt" in capsys.readouterr().out


def test_both_front_ends_give_the_partitioner_the_same_graph():
    """torch.export and Dynamo + AOTAutograd hand the middle passes the same ops: same partitions, same ops
    per partition, same ops left to Inductor (the detector splits at atan2)."""
    from examples.models import build
    from hybrid_trt.backend import _hybrid_graph
    from hybrid_trt.capture.exported import capture_export
    from hybrid_trt.engines.runtime import Policy
    from hybrid_trt.engines.store import EngineStore
    from hybrid_trt.report import new_report

    model, x = build("detector", small=True)
    options = {"cache": False}
    with torch.no_grad():
        torch.compile(model, backend="hybrid_trt", options=options)(x)
    dynamo = hybrid_trt.last_report()
    capture = capture_export(model, (x,))
    exported = new_report()
    _hybrid_graph(capture.gm, capture.weights, len(capture.inputs), hybrid_trt.make_options(options), exported,
                  EngineStore(None), Policy(), {})
    assert [p.ops for p in exported.partitions] == [p.ops for p in dynamo.partitions]
    assert sorted(op.op for op in exported.inductor_ops) == sorted(op.op for op in dynamo.inductor_ops)
    assert dynamo.partitions and "aten.atan2.default" in {op.op for op in dynamo.inductor_ops}


@pytest.mark.parametrize("device", ["meta", "cuda"])
def test_load_on_a_device_that_cannot_run_the_package_names_the_right_ones(package, device):
    """A CPU package asked to load on "meta" told the user to export with inputs on meta; on CUDA, to export on
    CUDA. Both are environment failures that say what the package runs on."""
    from hybrid_trt.export.deploy import _load_device
    manifest = pkg.open_package(package).manifest
    with pytest.raises(pkg.PackageError, match="cpu") as e:
        _load_device(manifest, device)
    assert e.value.check == "environment"
    if device == "meta":
        assert "give 'cpu' or 'cuda'" in str(e.value)


def test_dim_check_reads_the_manifest_dims_and_names_what_is_wrong():
    """The check a loaded dynamic package runs before each call (no export needed): static sizes, ranges, and
    inputs sized by one symbol; entries without ``dims`` (older packages) and derived sizes are not checked."""
    from hybrid_trt.export.input_dims import DimCheck
    inputs = [{"name": "image", "dims": [{"symbol": "s0", "min": 2, "max": 4}, 3, 16, 16]},
              {"name": "features", "dims": [{"symbol": "s0", "min": 2, "max": 4}, {"expr": "2*s1"}]}]
    check = DimCheck(inputs)

    def problem(*shapes):
        return check.problem([torch.empty(s) for s in shapes])
    assert problem((3, 3, 16, 16), (3, 10)) is None            # inside the range; the derived size unchecked
    assert "dimension 0 is 5, outside the exported range [2..4] of its size s0" in problem((5, 3, 16, 16), (5, 2))
    assert "'image' dimension 1 is 4, but the package was exported with it fixed at 3" in \
        problem((3, 4, 16, 16), (3, 2))
    tied = problem((3, 3, 16, 16), (4, 2))
    assert "'features' dimension 0 is 4 and input 'image' dimension 0 is 3" in tied and "must be equal" in tied
    assert check.spec_text(inputs) == ("image=s0:[2..4]x3x16x16, features=s0:[2..4]x[2*s1] (dimensions sized by "
                                       "one symbol, s0, must be equal)")
    assert not DimCheck([{"name": "x", "dynamic_dims": [0]}]).active  # a package written before "dims"
    # A symbol no other dimension shares is not named: its range says all, Dynamo's name (s77) nothing.
    alone = [{"name": "x", "dims": [{"symbol": "s77", "min": 1, "max": 2}, 3]}]
    assert DimCheck(alone).spec_text(alone) == "x=[1..2]x3"
    said = DimCheck(alone).problem([torch.empty(3, 3)])
    assert said == "input 'x' dimension 0 is 3, outside the exported range [1..2]", said


@pytest.mark.parametrize("damage,code,named", [(None, 0, None),
                                               ("flip", pkg.EXIT_CODES["checksums"], "engine.model.onnx (sha256"),
                                               ("delete", pkg.EXIT_CODES["files"], "missing file(s)")])
def test_inspect_says_when_a_file_is_missing_or_damaged(package, capsys, damage, code, named):
    """inspect printed a damaged package's manifest and exited 0, although the docs give inspect the exit codes
    of the checks; it prints the manifest, then names the missing or damaged files, and exits with their code."""
    from hybrid_trt.export import cli
    if damage == "flip":
        data = bytearray(_engine(package).read_bytes())
        data[100] ^= 0x01
        _engine(package).write_bytes(bytes(data))
    elif damage == "delete":
        _engine(package).unlink()
    for argv in (["inspect", str(package)], ["inspect", "--json", str(package)]):
        assert cli.main(argv) == code
        out, err = capsys.readouterr()
        assert "onnxruntime" in out
        assert (named is None and not err) or (named in err and "hybrid-trt inspect: error:" in err), err
