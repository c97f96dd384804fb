"""The disk engine store (hybrid_trt/engines/store.py), with real files and real processes.

Worker processes run ``_WORKER`` (python -c). They load store.py without importing torch (it needs only the
standard library and the package logger), so they start in milliseconds and really race each other; each one
prints one JSON line with what it saw, including the warnings the ``hybrid_trt`` logger emitted in it.
"""
from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

from _helpers import CHILD_WARNING_COLLECTOR
from hybrid_trt.engines import EngineStore, default_cache_dir

REPO = pathlib.Path(__file__).resolve().parents[1]

_WORKER = r"""
import hashlib, json, logging, os, random, sys, time, types
task = json.loads(sys.argv[1])
for name in ("hybrid_trt", "hybrid_trt.engines"):  # the packages without their __init__ (which imports torch)
    pkg = types.ModuleType(name)
    pkg.__path__ = [os.path.join(task["repo"], *name.split("."))]
    sys.modules[name] = pkg
from hybrid_trt.engines.store import EngineStore
assert "torch" not in sys.modules

""" + CHILD_WARNING_COLLECTOR + r"""

def content(key, generation, size):
    return random.Random(f"{key}:{generation}").randbytes(size)

if task.get("fsize_limit"):  # a full disk, for real: writes beyond the limit fail with EFBIG
    import resource, signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (task["fsize_limit"], task["fsize_limit"]))

store = EngineStore(task["root"], max_bytes=task.get("max_bytes", 2 << 30))
size = task.get("size", 1000)
if task.get("go"):
    while not os.path.exists(task["go"]):
        time.sleep(0.001)
out = {}
kind = task["task"]
if kind == "get_or_build":
    def build():
        with open(task["counter"], "a") as f:
            f.write(f"{os.getpid()}\n")
        if task.get("marker"):
            open(task["marker"], "w").close()
        time.sleep(task.get("sleep", 0))
        return {"engine.bin": content(task["key"], task.get("generation", 0), size)}, \
            {"environment": task.get("env", {}), "generation": task.get("generation", 0)}
    entry, loaded = store.get_or_build(task["key"], build, expect_environment=task.get("env"))
    out = {"loaded": loaded, "stored": entry.path is not None, "generation": entry.meta["generation"],
           "ok": entry.files == {"engine.bin": content(task["key"], entry.meta["generation"], size)}}
elif kind == "get":
    entry = store.get(task["key"], expect_environment=task.get("env"))
    out = {"found": entry is not None}
elif kind == "writer":
    puts, deadline = 0, time.time() + task["seconds"]
    while time.time() < deadline:
        key = task["keys"][puts % len(task["keys"])]
        files = {name: content(key + name, puts, size) for name in ("engine.bin", "timing.cache")}
        store.put(key, files, {"generation": puts})
        puts += 1
    out = {"puts": puts}
elif kind == "reader":
    hits = misses = bad = 0
    rng, deadline = random.Random(os.getpid()), time.time() + task["seconds"]
    while time.time() < deadline:
        key = rng.choice(task["keys"])
        entry = store.get(key)
        if entry is None:
            misses += 1
            continue
        g = entry.meta["generation"]
        expected = {name: content(key + name, g, size) for name in ("engine.bin", "timing.cache")}
        hits += 1
        bad += entry.files != expected
    out = {"hits": hits, "misses": misses, "bad": bad}
elif kind == "shared_writer":  # replaces one shared build cache in a loop, each blob tagged with its writer
    writes, deadline = 0, time.time() + task["seconds"]
    while time.time() < deadline:
        tag = f"{os.getpid()}:{writes}"
        store.write_shared(task["name"], tag.encode() + b"|" + content(tag, 0, size))
        writes += 1
    out = {"writes": writes}
elif kind == "shared_reader":
    hits = misses = bad = 0
    deadline = time.time() + task["seconds"]
    while time.time() < deadline:
        data = store.read_shared(task["name"])
        if data is None:
            misses += 1
            continue
        tag, _, body = data.partition(b"|")
        hits += 1
        bad += body != content(tag.decode(), 0, size)
    out = {"hits": hits, "misses": misses, "bad": bad}
out["warnings"] = warnings
print(json.dumps(out))
"""


def _task(root, task, **fields) -> str:
    return json.dumps({"repo": str(REPO), "root": str(root), "task": task, **fields})


def _run(root, task, timeout=60, **fields) -> dict:
    done = subprocess.run([sys.executable, "-c", _WORKER, _task(root, task, **fields)], capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _start(root, task, **fields) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _WORKER, _task(root, task, **fields)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, timeout=120) -> dict:
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, stderr
    return json.loads(stdout.strip().splitlines()[-1])


def _key(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def _entry_dir(root, key) -> pathlib.Path:
    return pathlib.Path(root) / "v1" / key[:2] / key


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "hybrid_trt" and r.levelno >= logging.WARNING]


# -- basics ----------------------------------------------------------------------------------------------------
def test_put_get_layout_and_meta(tmp_path):
    store, key = EngineStore(tmp_path), _key("a")
    files = {"model.onnx": b"\x08\x07" * 100, "optimized.onnx": b"x" * 10}
    stored = store.put(key, files, {"environment": {"torch": "2"}, "delegate": "onnxruntime"})
    path = _entry_dir(tmp_path, key)
    assert stored.path == path and sorted(p.name for p in path.iterdir()) == sorted([*files, "meta.json",
                                                                                     "last_used"])
    meta = json.loads((path / "meta.json").read_text())
    assert meta["key"] == key and meta["format"] == 1 and meta["delegate"] == "onnxruntime"
    assert meta["files"]["model.onnx"] == {"sha256": hashlib.sha256(files["model.onnx"]).hexdigest(), "size": 200}
    loaded = EngineStore(tmp_path).get(key)  # a fresh store object sees it: nothing is held in memory
    assert loaded.files == files and loaded.meta == meta == stored.meta and loaded.nbytes == 210
    assert EngineStore(tmp_path).get(_key("b")) is None
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temporary directory left


def test_disabled_store_builds_every_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store, builds = EngineStore(None), []
    key = _key("a")
    assert store.put(key, {"e": b"1"}, {}) is None and store.get(key) is None
    for _ in range(2):
        entry, loaded = store.get_or_build(key, lambda: (builds.append(1) or {"e": b"1"}, {}))
        assert not loaded and entry.path is None and entry.files == {"e": b"1"}
    assert len(builds) == 2 and not list(tmp_path.iterdir())


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "hybrid_trt"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # ignored, as the XDG spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "hybrid_trt"


# -- concurrency -----------------------------------------------------------------------------------------------
def test_four_processes_build_an_entry_once(tmp_path):
    root, counter, go = tmp_path / "cache", tmp_path / "builds.txt", tmp_path / "go"
    key = _key("model")
    procs = [_start(root, "get_or_build", key=key, counter=str(counter), go=str(go), sleep=0.5, size=1 << 20)
             for _ in range(4)]
    time.sleep(0.5)  # let all four start and wait on the go file
    go.touch()
    results = [_finish(p) for p in procs]
    builds = counter.read_text().splitlines()
    assert len(builds) == 1, f"built {len(builds)} times by {builds}"
    assert sorted(r["loaded"] for r in results) == [False, True, True, True]
    assert all(r["ok"] and r["stored"] and not r["warnings"] for r in results), results


def test_a_reader_never_sees_a_torn_entry(tmp_path):
    """A writer publishes 2 MB entries in a loop while a bound of ~3 entries evicts them under the readers."""
    root, size = tmp_path / "cache", 1 << 20
    keys = [_key(f"k{i}") for i in range(6)]
    writer = _start(root, "writer", keys=keys, seconds=4, size=size, max_bytes=3 * 2 * size + 10_000)
    readers = [_start(root, "reader", keys=keys, seconds=4, size=size) for _ in range(2)]
    w, rs = _finish(writer), [_finish(r) for r in readers]
    assert w["puts"] > len(keys) and not w["warnings"], w
    for r in rs:
        assert r["bad"] == 0 and not r["warnings"], r  # every get: None or a whole, verified entry
        assert r["hits"] > 0 and r["misses"] > 0, r  # both outcomes really happened


def test_shared_build_caches_are_replaced_whole_under_concurrent_writers(tmp_path):
    """A shared build cache (TensorRT's timing cache) is replaced whole by every build that extends it: two
    processes replacing it in a loop and two reading it never give a reader a mixed or torn file."""
    root, size = tmp_path / "cache", 1 << 18
    writers = [_start(root, "shared_writer", name="tensorrt-timing-x", seconds=3, size=size) for _ in range(2)]
    readers = [_start(root, "shared_reader", name="tensorrt-timing-x", seconds=3, size=size) for _ in range(2)]
    ws, rs = [_finish(w) for w in writers], [_finish(r) for r in readers]
    assert all(w["writes"] > 5 and not w["warnings"] for w in ws), ws
    for r in rs:
        assert r["bad"] == 0 and r["hits"] > 0 and not r["warnings"], r
    shared = root / "shared"
    assert [p.name for p in shared.iterdir()] == ["tensorrt-timing-x"]  # no temporary file left behind


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "empty", "no header"])
def test_a_damaged_shared_build_cache_is_removed_with_one_warning(tmp_path, damage, caplog):
    store = EngineStore(tmp_path)
    assert store.read_shared("tensorrt-timing-x") is None  # none yet
    store.write_shared("tensorrt-timing-x", b"timings" * 100)
    assert EngineStore(tmp_path).read_shared("tensorrt-timing-x") == b"timings" * 100
    path = tmp_path / "shared" / "tensorrt-timing-x"
    blob = path.read_bytes()
    path.write_bytes({"flipped byte": blob[:-1] + b"X", "truncated": blob[:-10], "empty": b"",
                      "no header": b"timings" * 100}[damage])
    fresh = EngineStore(tmp_path)
    with caplog.at_level(logging.WARNING, logger="hybrid_trt"):
        assert fresh.read_shared("tensorrt-timing-x") is None
        assert fresh.read_shared("tensorrt-timing-x") is None  # removed: a plain miss now
    assert not path.exists()
    assert len(_warnings(caplog)) == 1 and "damaged shared build cache" in _warnings(caplog)[0]
    fresh.write_shared("tensorrt-timing-x", b"new")
    assert EngineStore(tmp_path).read_shared("tensorrt-timing-x") == b"new"


def test_a_dead_writers_temporary_shared_cache_is_cleaned_up_later(tmp_path):
    store = EngineStore(tmp_path)
    store.write_shared("tensorrt-timing-x", b"t")
    old = tmp_path / "shared" / ".tmp-tensorrt-timing-x-1-dead"
    recent = tmp_path / "shared" / ".tmp-tensorrt-timing-x-2-live"
    old.write_bytes(b"half")
    recent.write_bytes(b"half")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    store.write_shared("tensorrt-timing-x", b"u")
    assert not old.exists() and recent.exists()  # a writer may still be writing the recent one
    assert store.read_shared("tensorrt-timing-x") == b"u"


def test_shared_build_caches_off_read_only_or_badly_named(tmp_path):
    EngineStore(None).write_shared("tensorrt-timing-x", b"t")
    assert EngineStore(None).read_shared("tensorrt-timing-x") is None
    EngineStore(tmp_path, read_only=True).write_shared("tensorrt-timing-x", b"t")
    assert not (tmp_path / "shared").exists()
    for bad in ("../escape", "a/b", ""):
        with pytest.raises(ValueError, match="engine store: bad key"):
            EngineStore(tmp_path).write_shared(bad, b"t")


def test_a_killed_lock_holder_does_not_block_others(tmp_path):
    """flock is released when its holder dies: a lock file left behind is harmless."""
    root, key = tmp_path / "cache", _key("m")
    marker, counter = tmp_path / "building", tmp_path / "builds.txt"
    holder = _start(root, "get_or_build", key=key, counter=str(counter), marker=str(marker), sleep=600)
    deadline = time.time() + 60
    while not marker.exists():
        assert time.time() < deadline and holder.poll() is None, "the lock holder never started building"
        time.sleep(0.01)
    holder.kill()
    holder.wait()
    assert (root / "locks" / f"{key}.lock").exists()
    result = _run(root, "get_or_build", key=key, counter=str(counter), timeout=30)
    assert result["loaded"] is False and result["ok"] and result["stored"] and not result["warnings"]
    assert _run(root, "get_or_build", key=key, counter=str(counter))["loaded"] is True


# -- corrupt entries -------------------------------------------------------------------------------------------
def _flip_byte(path):
    data = bytearray((path / "engine.bin").read_bytes())
    data[len(data) // 2] ^= 0x40
    (path / "engine.bin").write_bytes(bytes(data))


CORRUPTIONS = {
    "flipped byte": _flip_byte,
    "invalid meta.json": lambda p: (p / "meta.json").write_bytes(b"{not json"),
    "meta.json of another key": lambda p: (p / "meta.json").write_text(
        (p / "meta.json").read_text().replace(p.name, _key("other"))),
    "meta.json without files": lambda p: (p / "meta.json").write_text('{"format": 1}'),
    "zero-length meta.json": lambda p: (p / "meta.json").write_bytes(b""),
    "zero-length file": lambda p: (p / "engine.bin").write_bytes(b""),
    "truncated file": lambda p: (p / "engine.bin").write_bytes((p / "engine.bin").read_bytes()[:-100]),
    "missing file": lambda p: (p / "engine.bin").unlink(),
    "missing meta.json": lambda p: (p / "meta.json").unlink(),
    # a leftover file where the entry's directory belongs: publishing the rebuild failed (ENOTDIR) in every process
    "a file in its place": lambda p: (shutil.rmtree(p), p.write_bytes(b"leftover")),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_corrupt_entry_is_removed_and_rebuilt_with_one_warning(tmp_path, corruption):
    root, key, counter = tmp_path / "cache", _key("m"), tmp_path / "builds.txt"
    first = _run(root, "get_or_build", key=key, counter=str(counter), generation=1)
    assert first["loaded"] is False and first["stored"]
    CORRUPTIONS[corruption](_entry_dir(root, key))
    # A fresh process meets the corrupt entry: it never loads it (the rebuilt generation is 2), never raises.
    second = _run(root, "get_or_build", key=key, counter=str(counter), generation=2)
    assert second["loaded"] is False and second["generation"] == 2 and second["ok"] and second["stored"]
    assert len(second["warnings"]) == 1 and "corrupt" in second["warnings"][0], second["warnings"]
    assert len(counter.read_text().splitlines()) == 2
    third = _run(root, "get_or_build", key=key, counter=str(counter), generation=3)  # the rebuilt one is whole
    assert third["loaded"] is True and third["generation"] == 2 and third["ok"] and not third["warnings"]


def test_corrupt_entries_warn_once_per_store(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="hybrid_trt")
    store, keys = EngineStore(tmp_path), [_key("a"), _key("b")]
    for key in keys:
        store.put(key, {"engine.bin": b"e" * 1000}, {})
        _flip_byte(_entry_dir(tmp_path, key))
    fresh = EngineStore(tmp_path)
    assert fresh.get(keys[0]) is None and fresh.get(keys[1]) is None  # get alone: a miss, never raises
    assert len(_warnings(caplog)) == 1 and not _entry_dir(tmp_path, keys[1]).exists()
    assert any("corrupt" in r.getMessage() and keys[1] in r.getMessage() for r in caplog.records
               if r.levelno == logging.DEBUG)  # the later ones are still there for whoever looks


# -- unusable directories --------------------------------------------------------------------------------------
def _assert_built_in_memory(store, caplog, key):
    for _ in range(2):  # and only one warning for both
        entry, loaded = store.get_or_build(key, lambda: ({"engine.bin": b"e" * 100}, {"delegate": "x"}))
        assert not loaded and entry.path is None and entry.files == {"engine.bin": b"e" * 100}
        assert entry.meta["delegate"] == "x"
    assert len(_warnings(caplog)) == 1, _warnings(caplog)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod 0o555; see the not-a-directory test")
def test_read_only_directory_builds_in_memory_and_still_loads(tmp_path, hybrid_logs):
    old = _key("old")
    EngineStore(tmp_path).put(old, {"engine.bin": b"o" * 10}, {})
    for path in [tmp_path, *tmp_path.rglob("*")]:
        if path.is_dir():
            path.chmod(0o555)
    try:
        store = EngineStore(tmp_path)
        _assert_built_in_memory(store, hybrid_logs, _key("new"))
        assert store.get(old).files == {"engine.bin": b"o" * 10}  # a read-only cache is still a cache
    finally:
        for path in [tmp_path, *tmp_path.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)


def test_directory_that_cannot_be_created_builds_in_memory(tmp_path, hybrid_logs):
    """Works as root too, where chmod does not stop writes: the cache path lies under a regular file."""
    (tmp_path / "file").write_text("")
    store = EngineStore(tmp_path / "file" / "cache")
    _assert_built_in_memory(store, hybrid_logs, _key("new"))
    assert "cannot write" in _warnings(hybrid_logs)[0]
    # the advice names the stray file to remove (it said "Free space or make it writable")
    assert f"Remove the file {tmp_path / 'file'} (the cache needs a directory there)" in _warnings(hybrid_logs)[0]


def test_an_unwritable_cache_warns_once_per_process_not_once_per_compile(tmp_path, hybrid_logs):
    """Two models (and a recompile for another batch) compiled against one cache directory that cannot be
    created: each compiles and matches eager, with one warning in all."""
    import torch
    import torch.nn as nn

    import hybrid_trt  # noqa: F401 - registers the backend

    torch._dynamo.reset()
    (tmp_path / "file").write_text("")
    options = {"cache_dir": str(tmp_path / "file" / "cache")}
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).eval(),
              nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3)).eval()]
    inputs = [[torch.randn(2, 8), torch.randn(5, 8)], [torch.randn(1, 3, 9, 9)]]
    with torch.no_grad():
        for model, xs in zip(models, inputs):
            compiled = torch.compile(model, backend="hybrid_trt", options=options)
            for x in xs:
                torch.testing.assert_close(compiled(x), model(x))
    warned = _warnings(hybrid_logs)
    assert len(warned) == 1 and "cannot write" in warned[0], warned


def test_full_disk_builds_in_memory_in_process(tmp_path, hybrid_logs, monkeypatch):
    """ENOSPC simulated in-process (fsync is where a full or quota-bound disk reports it on many file systems);
    the next test fills the 'disk' for real in a subprocess."""
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    store = EngineStore(tmp_path)
    _assert_built_in_memory(store, hybrid_logs, _key("new"))
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".tmp-")]  # no half-written entry left


def test_full_disk_builds_in_memory_in_a_process(tmp_path):
    """RLIMIT_FSIZE makes every write past 64 KiB fail (EFBIG), as a full disk would, also for root."""
    root, counter = tmp_path / "cache", tmp_path / "builds.txt"
    result = _run(root, "get_or_build", key=_key("m"), counter=str(counter), size=1 << 20, fsize_limit=64 << 10)
    assert result["loaded"] is False and result["ok"] and not result["stored"]
    assert len(result["warnings"]) == 1 and "cannot write" in result["warnings"][0]
    assert not [p for p in root.rglob("*") if p.is_file() and p.parent.name != "locks"]


def _block_lock_file(root, key) -> pathlib.Path:
    blocker = root / "locks" / f"{key}.lock"
    blocker.mkdir(parents=True)
    (blocker / "notes.txt").write_text("not ours\n")  # whatever is in it is left alone
    return blocker


def _block_locks_directory(root, key) -> pathlib.Path:
    root.mkdir()
    (root / "locks").write_text("not ours\n")
    return root / "locks"


@pytest.mark.parametrize("block", [_block_lock_file, _block_locks_directory])
def test_a_lock_path_taken_by_something_else_warns_once_and_still_caches(tmp_path, block):
    """A directory where the key's lock file belongs (or a file where the locks directory does): no process can
    take the lock. It read as an unwritable cache ('cannot write ... built without caching', which was false:
    the entry was stored), and a bad entry was never removed, so every process rebuilt it for good. Now: one
    warning naming the path and saying to remove it; entries are stored, loaded, and replaced when bad."""
    root, key, counter = tmp_path / "cache", _key("m"), tmp_path / "builds.txt"
    blocker = block(root, key)
    first = _run(root, "get_or_build", key=key, counter=str(counter), generation=1)
    assert first["loaded"] is False and first["stored"] and first["ok"], first
    assert len(first["warnings"]) == 1, first["warnings"]
    warning = first["warnings"][0]
    assert str(blocker) in warning and "Remove that" in warning and "cannot write" not in warning, warning
    _flip_byte(_entry_dir(root, key))
    second = _run(root, "get_or_build", key=key, counter=str(counter), generation=2)
    assert second["loaded"] is False and second["generation"] == 2 and second["stored"] and second["ok"], second
    assert sorted("corrupt" in w for w in second["warnings"]) == [False, True], second["warnings"]
    third = _run(root, "get_or_build", key=key, counter=str(counter), generation=3)
    assert third["loaded"] is True and third["generation"] == 2 and third["ok"], third  # the rebuild was stored
    assert len(counter.read_text().splitlines()) == 2
    assert blocker.exists() and (blocker / "notes.txt" if blocker.is_dir() else blocker).read_text() == "not ours\n"


# -- size bound and environments -------------------------------------------------------------------------------
def test_eviction_is_by_last_use_not_write_time(tmp_path):
    size = 100_000
    store = EngineStore(tmp_path, max_bytes=int(3.5 * size))  # three entries fit, four do not
    a, b, c, d = (_key(n) for n in "abcd")
    for key in (a, b, c):
        store.put(key, {"engine.bin": os.urandom(size)}, {})
    # A is used by another process: last use lives on disk, not in this store object.
    assert _run(tmp_path, "get", key=a)["found"]
    store.put(d, {"engine.bin": os.urandom(size)}, {})
    present = {k for k in (a, b, c, d) if _entry_dir(tmp_path, k).exists()}
    assert present == {a, c, d}, "B (written after A, used before it) must go, not A (written first)"


def test_a_stray_file_in_the_store_does_not_turn_eviction_off(tmp_path):
    """A file where shard directories live (a note, an editor's backup) failed the whole eviction pass: the bound
    was never enforced again, silently. It is skipped, and left alone."""
    size = 100_000
    store = EngineStore(tmp_path, max_bytes=int(1.5 * size))
    a, b = _key("a"), _key("b")
    store.put(a, {"engine.bin": os.urandom(size)}, {})
    stray = _entry_dir(tmp_path, a).parent.parent / "notes.txt"
    stray.write_text("a stray file\n")
    store.put(b, {"engine.bin": os.urandom(size)}, {})
    assert not _entry_dir(tmp_path, a).exists() and _entry_dir(tmp_path, b).exists() and stray.exists()


def test_an_entry_over_the_bound_is_not_stored_and_says_so_once(tmp_path, caplog):
    # Stored, it was evicted again by the next write (a compile's graph manifest), silently: a 2.4 GB ViT-L entry
    # was built in every process under the former 2 GiB default.
    store = EngineStore(tmp_path, max_bytes=1000)
    small = _key("small")
    store.put(small, {"engine.bin": b"s" * 100}, {})
    for name in ("big", "bigger"):
        assert store.put(_key(name), {"engine.bin": b"b" * 5000}, {}) is None
        assert not _entry_dir(tmp_path, _key(name)).exists() and store.get(_key(name)) is None
    assert store.get(small) is not None  # nothing evicted for an entry that was never stored
    warned = _warnings(caplog)
    assert len(warned) == 1 and "cache_max_bytes" in warned[0] and "not cached" in warned[0], warned
    entry, loaded = store.get_or_build(_key("big"), lambda: ({"engine.bin": b"b" * 5000}, {}))
    assert not loaded and entry.files["engine.bin"] == b"b" * 5000  # built and served from memory


def test_entries_of_another_environment_are_never_returned(tmp_path):
    from hybrid_trt.engines import engine_key
    import onnx
    from onnx import helper

    root, counter = tmp_path / "cache", tmp_path / "builds.txt"
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    model = helper.make_model(graph)
    env_a = {"torch": "2.6.0", "gpu_arch": "sm_90"}
    env_b = {"torch": "2.6.0", "gpu_arch": "sm_80"}  # another GPU architecture
    key_a, key_b = (engine_key(model=model, input_specs=[((2,), "torch.float32", (1,), "cuda")],
                               delegate="tensorrt", delegate_options={}, environment=e) for e in (env_a, env_b))
    assert key_a != key_b  # first line of defence: the environment is in the key
    assert _run(root, "get_or_build", key=key_a, counter=str(counter), env=env_a)["loaded"] is False
    assert _run(root, "get_or_build", key=key_b, counter=str(counter), env=env_b)["loaded"] is False
    assert _run(root, "get_or_build", key=key_a, counter=str(counter), env=env_a)["loaded"] is True
    # Second line: an entry whose recorded environment is not the expected one is never returned, even under
    # the expected key (a key computed without the environment, or a copied directory).
    rebuilt = _run(root, "get_or_build", key=key_a, counter=str(counter), env=env_b, generation=5)
    assert rebuilt["loaded"] is False and rebuilt["generation"] == 5 and len(rebuilt["warnings"]) == 1
    assert "another environment" in rebuilt["warnings"][0]
    missed = _run(root, "get", key=key_a, env=env_a)  # a bare get: a miss too, the entry removed
    assert not missed["found"] and len(missed["warnings"]) == 1 and not _entry_dir(root, key_a).exists()
    assert len(counter.read_text().splitlines()) == 3


def test_leftovers_of_a_dead_writer_are_cleaned_up(tmp_path):
    store = EngineStore(tmp_path)
    key = _key("a")
    store.put(key, {"engine.bin": b"a"}, {})
    shard = _entry_dir(tmp_path, key).parent
    stale, fresh, trash = shard / f".tmp-{key}-1-dead", shard / f".tmp-{key}-2-busy", shard / f".trash-{key}-x"
    for path in (stale, fresh, trash):
        path.mkdir()
        (path / "engine.bin").write_bytes(b"partial")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    store.put(_key("b"), {"engine.bin": b"b"}, {})  # housekeeping runs with each put
    assert not stale.exists() and not trash.exists() and fresh.exists()  # a young one may be a live writer's


def test_bad_keys_and_file_names_are_refused(tmp_path):
    store = EngineStore(tmp_path)
    for key in ("../escape", "", ".hidden", "a/b"):
        with pytest.raises(ValueError, match="engine store: bad key"):
            store.get_or_build(key, lambda: ({}, {}))
    for name in ("meta.json", "last_used", "../x", "sub/file"):
        with pytest.raises(ValueError, match="engine store: bad file name"):
            store.put(_key("a"), {name: b""}, {})


def test_an_engine_larger_than_the_cache_is_not_stored_and_the_warning_gives_both_sizes(tmp_path, caplog):
    store = EngineStore(tmp_path, max_bytes=4096)
    with caplog.at_level(logging.WARNING, logger="hybrid_trt"):
        assert store.put(_key("big"), {"engine": b"x" * 10_000}, {"kind": "test"}) is None
    assert store.get(_key("big")) is None
    (record,) = [r for r in caplog.records if "more than the engine cache" in r.getMessage()]
    assert "9.77 KiB" in record.getMessage() and "(4.00 KiB," in record.getMessage(), record.getMessage()
