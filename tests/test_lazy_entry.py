"""Lazy entry reads (``EngineStore.get(lazy=True)``, used by warm starts): a file is read and checksummed only when
first used, never handed out unverified, and an entry evicted meanwhile still serves what was published."""
import hashlib
import logging
import shutil

import pytest

from hybrid_trt.engines.store import CorruptEntry, EngineStore

# Each test's own store, and the test run's Inductor cache (these tests are about the store).
from test_cache_isolation import run_store_child as run_child


def _key(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def _entry_dir(root, key):
    return root / "v1" / key[:2] / key


def test_lazy_get_checks_each_file_when_first_used_and_removes_a_corrupt_entry(tmp_path, caplog):
    store, key = EngineStore(tmp_path), _key("a")
    store.put(key, {"engine.bin": b"e" * 100, "recipe.pt": b"r" * 100}, {"kind": "static"})
    entry = store.get(key, lazy=True)
    assert set(entry.files) == {"engine.bin", "recipe.pt"} and "recipe.pt" in entry.files
    (_entry_dir(tmp_path, key) / "recipe.pt").write_bytes(b"x" * 100)  # same size: only the checksum can tell
    assert entry.files["engine.bin"] == b"e" * 100
    with caplog.at_level(logging.WARNING, logger="hybrid_trt"):
        with pytest.raises(CorruptEntry, match="sha256"):
            entry.files["recipe.pt"]
    assert not _entry_dir(tmp_path, key).exists()  # removed, so the next compile rebuilds it
    assert [r for r in caplog.records if r.levelno >= logging.WARNING and "corrupt" in r.getMessage()]
    assert store.get(key) is None


def test_lazy_get_checks_sizes_at_once(tmp_path):
    store, key = EngineStore(tmp_path), _key("b")
    store.put(key, {"engine.bin": b"e" * 100, "recipe.pt": b"r" * 100}, {"kind": "static"})
    (_entry_dir(tmp_path, key) / "recipe.pt").write_bytes(b"r" * 10)  # truncated
    assert store.get(key, lazy=True) is None and not _entry_dir(tmp_path, key).exists()


def test_lazy_entry_evicted_after_get_still_serves_the_published_bytes(tmp_path):
    store, key = EngineStore(tmp_path), _key("c")
    store.put(key, {"recipe.pt": b"r" * 1000}, {"kind": "static"})
    entry = store.get(key, lazy=True)
    shutil.rmtree(_entry_dir(tmp_path, key))  # another process evicted it
    assert entry.files["recipe.pt"] == b"r" * 1000


def _files(tmp_path, name):
    return sorted((tmp_path / "hybrid_trt" / "v1").glob(f"*/*/{name}"))


def _flip_a_byte(paths) -> None:
    """Damage each file at its middle byte, keeping its size: only a checksum tells."""
    for path in paths:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))


def test_warm_start_reads_neither_recipe_nor_lowered_model_and_rebuilds_a_corrupt_engine(tmp_path):
    cold = run_child(tmp_path, "hybrid_trt", "transformer")
    assert cold["matches"] and cold["partitions"], cold["tables"]
    recipes, lowered = _files(tmp_path, "recipe.pt"), _files(tmp_path, "engine.model.onnx")
    assert recipes and lowered
    for path in recipes + lowered:  # damaged, same size: a warm start that checksummed them would rebuild
        path.write_bytes(bytes(b ^ 0xFF for b in path.read_bytes()))
    warm = run_child(tmp_path, "hybrid_trt", "transformer")
    assert warm["matches"] and warm["from_graph_manifest"] == [True], warm["tables"]
    assert {s for p in warm["partitions"] for s in p["engines"]} == {"loaded"}, warm["tables"]

    _flip_a_byte(_files(tmp_path, "engine.optimized.onnx"))  # the file a load does read
    again = run_child(tmp_path, "hybrid_trt", "transformer")
    assert again["matches"], again["tables"]
    assert {s for p in again["partitions"] for s in p["engines"]} == {"built"}, again["tables"]

    # The optimized model damaged and the lowered one intact: the load fell back to the lowered model of the entry
    # the store had just removed (its warning said "rebuilt"), stored nothing, and the next process built again.
    optimized = _files(tmp_path, "engine.optimized.onnx")
    _flip_a_byte(optimized)
    rebuilt = run_child(tmp_path, "hybrid_trt", "transformer")
    assert rebuilt["matches"], rebuilt["tables"]
    assert {s for p in rebuilt["partitions"] for s in p["engines"]} == {"built"}, rebuilt["tables"]
    assert sorted(_files(tmp_path, "engine.optimized.onnx")) == sorted(optimized)  # stored again


def test_a_damaged_recipe_of_a_symbolic_partition_is_found_at_compile_time_and_rebuilt(tmp_path):
    """A warm start that meets a new shape builds its engine from the recipe. A damaged recipe made that call raise
    (its Inductor fallback needs the recipe too); now a symbolic partition's recipe is checked when the warm start
    loads the entry, and a damaged one is removed, with a warning, and the graph compiled again from the trace:
    every shape, the new one included, matches eager."""
    cold = run_child(tmp_path, "hybrid_trt", "dynamic")
    assert cold["matches"] and cold["partitions"], cold["tables"]
    recipes = _files(tmp_path, "recipe.pt")
    assert recipes
    _flip_a_byte(recipes)  # same size, one byte flipped: only the checksum tells
    warm = run_child(tmp_path, "hybrid_trt", "dynamic_new")
    assert warm["matches"] and warm["from_graph_manifest"] == [False], warm["tables"]
    # the per-shape engines are entries of their own (intact: loaded); the new shape's is built from the recipe
    assert [p["engines"] for p in warm["partitions"]] == [["loaded", "loaded", "built"]], warm["tables"]

