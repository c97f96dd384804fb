"""The disk store of built engines, addressed by content key (``key.py``).

Layout: ``<root>/v1/<key[:2]>/<key>/`` holds the entry's files, ``meta.json`` (format, key, each file's sha256
and size, environment, created, and what the caller adds: delegate, input specs, summary) and ``last_used``,
whose mtime is the entry's last use (eviction is least recently *used*). ``<root>/locks/<key>.lock`` are the
per-key inter-process locks. ``<root>/shared/<name>`` are caches that builds share and extend (TensorRT's timing
cache, ``Delegate.build_cache_name``): one file each, a line with its sha256 and size, then the bytes; replaced
whole (temp file + rename), the last writer's kept. They are small, outside the size bound and eviction.

Robustness:
- An entry is written into a temporary directory next to its final place (each file fsynced) and published
  with one ``rename`` of the directory, and removed by renaming it away first, so a reader sees a whole entry
  or none. Published entries are never modified, only removed.
- ``get_or_build`` holds ``fcntl.flock`` on the key's lock file around check-build-put, so N processes build
  an entry once and the others wait and load it. The kernel releases a flock when its holder dies, so a lock
  file left behind is harmless; lock files are never deleted (deleting one while a process holds it would let
  two processes in at once). A directory where a lock file belongs (or a file where ``locks/`` does) cannot be
  locked by anyone: one warning names it, and the store goes on unlocked for that key (storing, replacing bad
  entries), which at worst builds an entry once per process.
- Every file's checksum is verified on load; a corrupt, truncated or unreadable entry is removed and rebuilt.
- A read-only or full directory (any OSError on write) turns caching off for that write; the engine is still
  built and returned from memory.
- ``get(key, lazy=True)`` opens the entry's files and checks their sizes, but reads and checksums a file only
  when it is first used (``Entry.files[name]``): a warm start reads the engine it loads, not the recipe or the
  fallback model beside it. The files are held open from ``get`` on, so eviction meanwhile cannot take them
  away, and no byte is handed out before its file's sha256 matched; a mismatch then removes the entry (one
  warning) and raises ``CorruptEntry``.
Each kind of problem is logged once per store as a warning, later ones at debug level; the torch.compile path
shares one store per cache directory in a process (engines/runtime.py: engine_store), so that is once per process.

``get_or_build`` also takes ``expect_environment``; keys must be file-name safe (``[A-Za-z0-9][A-Za-z0-9_.-]*``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import pathlib
import re
import shutil
import threading
import time
import uuid
from typing import Any, BinaryIO, Callable, Iterator, Mapping, Optional

from ..log import logger

FORMAT = 1
# One entry holds a partition's lowered and optimized models, about twice its weights: ~2.4 GB for a float32 ViT-L
# (304 M parameters), ~5 GB for a ViT-H. At the former 2 GiB such an entry could never stay, and ten ResNet-50 input
# shapes (~0.2 GB each) filled the store.
DEFAULT_MAX_BYTES = 10 << 30
_META, _LAST_USED = "meta.json", "last_used"
_SHARED = "shared"
_DEBRIS_AGE_S = 3600  # temporary/trash directories of a process that died mid-write are removed after this
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")


def default_cache_dir() -> pathlib.Path:
    """``$XDG_CACHE_HOME/hybrid_trt``, else ``~/.cache/hybrid_trt`` (the XDG base directory rules)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the spec says to ignore a relative value
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "hybrid_trt"


@dataclasses.dataclass(frozen=True)
class Entry:
    key: str
    files: Mapping[str, bytes]  # a dict, or LazyFiles for get(lazy=True)
    meta: dict[str, Any]
    path: Optional[pathlib.Path]  # None: built in memory, not stored
    nbytes: int


class _Corrupt(Exception):
    pass


class CorruptEntry(RuntimeError):
    """A file of a lazily read entry failed its checksum (or could not be read) when first used. The entry has
    been removed (unless the store is read-only); the caller treats it as a miss and rebuilds."""


class LazyFiles(Mapping):
    """An entry's files, each read and checked against its sha256 on first access (then kept).

    The files were opened at ``get`` and their sizes checked there; reading through those descriptors means an
    entry removed or evicted meanwhile still serves the bytes that were published. Thread-safe."""

    def __init__(self, handles: dict[str, tuple[BinaryIO, int, str]], on_corrupt: Callable[[str], None]):
        self._handles = handles
        self._names = tuple(handles)
        self._data: dict[str, bytes] = {}
        self._on_corrupt = on_corrupt
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> bytes:
        data = self._data.get(name)
        if data is not None:
            return data
        with self._lock:
            if name in self._data:
                return self._data[name]
            if name not in self._handles:
                if name in self._names:
                    raise CorruptEntry(f"engine cache file {name} was closed unread (LazyFiles.close)")
                raise KeyError(name)
            f, size, sha = self._handles[name]
            try:
                f.seek(0)
                data = f.read(size + 1)
            except OSError as e:
                raise CorruptEntry(f"engine cache file {name} cannot be read ({e})") from e
            if len(data) != size:
                self._on_corrupt(f"{name} has {len(data)} bytes, meta.json says {size}")
                raise CorruptEntry(f"engine cache file {name} changed size after it was opened")
            if hashlib.sha256(data).hexdigest() != sha:
                self._on_corrupt(f"{name} fails its sha256 checksum")
                raise CorruptEntry(f"engine cache file {name} fails its sha256 checksum")
            self._data[name] = data
            del self._handles[name]
            f.close()
            return data

    def __contains__(self, name) -> bool:
        return name in self._names

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def close(self, keep: tuple = ()) -> None:
        """Close the files not read yet, except ``keep`` (all are closed when the mapping is released); a
        closed file's name stays listed, but reading it raises ``CorruptEntry``."""
        with self._lock:
            for name in [n for n in self._handles if n not in keep]:
                self._handles.pop(name)[0].close()

    def __del__(self):
        for f, _, _ in getattr(self, "_handles", {}).values():
            f.close()


class EngineStore:
    """Engines on disk under ``root`` (None: disabled, nothing touches disk), at most ``max_bytes`` in all."""

    def __init__(self, root: Optional[os.PathLike], max_bytes: int = DEFAULT_MAX_BYTES, read_only: bool = False):
        self.root = None if root is None else pathlib.Path(root)
        self.max_bytes = int(max_bytes)
        # read_only (an exported package, export/): entries are verified and served, never written, touched or
        # removed; a bad entry reads as a miss
        self.read_only = read_only
        self._warned: set[str] = set()

    # ------------------------------------------------------------------------------------------ public API

    def get(self, key: str, expect_environment: Optional[Mapping[str, str]] = None, *,
            lazy: bool = False) -> Optional[Entry]:
        """The verified entry of ``key``, or None. A bad entry is removed (one warning) and reads as a miss.

        ``lazy``: ``files`` is a ``LazyFiles``; sizes are checked now, each file's bytes and sha256 on first use
        (``CorruptEntry`` then)."""
        return None if self.root is None else self._get(key, expect_environment, locked=False, lazy=lazy)

    def put(self, key: str, files: Mapping[str, bytes], meta: Mapping[str, Any]) -> Optional[Entry]:
        """Store an entry atomically and evict beyond ``max_bytes``; None when disabled or not writable."""
        _check_key(key)
        for name in files:
            if name in (_META, _LAST_USED) or not _KEY.fullmatch(name):
                raise ValueError(f"engine store: bad file name {name!r} (plain names, not {_META}/{_LAST_USED})")
        if self.root is None or self.read_only:
            return None
        size = sum(len(d) for d in files.values())
        if size > self.max_bytes:  # stored, it would be evicted at the next write: nothing gained, disk churned
            self._warn("too large", f"hybrid_trt: an engine of {_bytes_text(size)} is more than the engine cache "
                       f"may hold ({_bytes_text(self.max_bytes)}, option cache_max_bytes); it is not cached, so "
                       "every process builds it again. Raise cache_max_bytes (HYBRID_TRT_CACHE_MAX_BYTES) above it.")
            return None
        final = self._entry_dir(key)
        tmp = final.parent / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
            info = {}
            for name, data in files.items():
                _write(tmp / name, data)
                info[name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            meta_bytes = json.dumps({**meta, "format": FORMAT, "key": key, "files": info, "created": time.time()},
                                    sort_keys=True, indent=1, default=str).encode()
            _write(tmp / _META, meta_bytes)
            _write(tmp / _LAST_USED, b"")
            _touch(tmp)
            try:
                os.rename(tmp, final)
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY) or not final.is_dir():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)  # published by another process meanwhile: same content
            _fsync_dir(final.parent)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            self._unwritable(e)
            return None
        entry = Entry(key, dict(files), json.loads(meta_bytes), final, size)
        self._evict(keep=key)
        return entry

    def discard(self, entry: Entry, why: str) -> None:
        """Remove ``entry``, which verified but does not load here (its delegate rejects the engine), with one
        warning, so that the engine built instead is stored in its place; left alone when another process
        replaced it meanwhile. Kept, it was rebuilt in memory by every process and never replaced."""
        if self.root is None or entry.path is None:
            return
        try:
            seen = (entry.path / _META).read_bytes()
            if json.loads(seen) != entry.meta:
                return
        except (OSError, ValueError):
            return
        self._discard(entry.key, entry.path, seen, "unloadable", f"an engine cache entry that does not load ({why})",
                      locked=False)

    def get_or_build(self, key: str, build: Callable[[], tuple[dict[str, bytes], dict]],
                     expect_environment: Optional[Mapping[str, str]] = None) -> tuple[Entry, bool]:
        """The stored entry of ``key`` (loaded=True), else ``build()``'s, stored when possible (loaded=False).

        Processes calling this for one key at once build it once: the others wait on the key's lock and load.
        ``build`` raising propagates (the lock is released)."""
        _check_key(key)
        if self.root is None:
            return _in_memory(key, *build()), False
        with self._lock(key, blocking=True) as locked:
            entry = self._get(key, expect_environment, locked=locked)
            if entry is not None:
                return entry, True
            files, meta = build()
            entry = self.put(key, files, meta)
            return (entry or _in_memory(key, files, meta)), False

    # ------------------------------------------------------------------------------------------ shared caches

    def read_shared(self, name: str) -> Optional[bytes]:
        """The bytes last written under ``name`` (``write_shared``), or None: none, caching off, or damaged (the
        file is removed, one warning: it is a cache, the build that reads it goes on without it)."""
        _check_key(name)
        if self.root is None:
            return None
        path = self.root / _SHARED / name
        try:
            blob = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            logger.debug("hybrid_trt: shared build cache %s unreadable (%s)", path, e)
            return None
        head, sep, data = blob.partition(b"\n")
        fields = head.split()
        if not sep or len(fields) != 2 or fields[1] != str(len(data)).encode() \
                or fields[0] != hashlib.sha256(data).hexdigest().encode():
            self._warn("corrupt shared", f"hybrid_trt: removed the damaged shared build cache {path} (its checksum "
                       "or size does not match); the build goes on without it and writes a new one.")
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        return data

    def write_shared(self, name: str, data: bytes) -> None:
        """Replace ``name``'s bytes atomically; concurrent writers: the last one's are kept (each holds what it
        read plus its own build's, so nothing is lost that a build cannot measure again)."""
        _check_key(name)
        if self.root is None or self.read_only:
            return
        folder = self.root / _SHARED
        tmp = folder / f".tmp-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            _write(tmp, f"{hashlib.sha256(data).hexdigest()} {len(data)}\n".encode() + data)
            os.replace(tmp, folder / name)
            now = time.time()
            for debris in folder.glob(f".tmp-{name}-*"):  # of a writer that died mid-write
                with contextlib.suppress(OSError):
                    if now - debris.stat().st_mtime > _DEBRIS_AGE_S:
                        debris.unlink()
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._unwritable(e)

    # ------------------------------------------------------------------------------------------ reading

    def _entry_dir(self, key: str) -> pathlib.Path:
        return self.root / f"v{FORMAT}" / key[:2] / key

    def _get(self, key: str, expect_environment, locked: bool, lazy: bool = False) -> Optional[Entry]:
        _check_key(key)
        path = self._entry_dir(key)
        try:
            if lazy:
                meta_bytes, entry = _open(key, path, lambda meta, why: self._discard(
                    key, path, meta, "corrupt", f"a corrupt engine cache entry ({why})", locked=False))
            else:
                meta_bytes, entry = _read(key, path)
        except _Corrupt as bad:
            self._discard(key, path, bad.args[1], "corrupt", f"a corrupt engine cache entry ({bad.args[0]})",
                          locked)
            return None
        except OSError as e:  # e.g. permission denied: leave the entry alone, build without it
            self._warn("unreadable", f"hybrid_trt: cannot read the engine cache entry {path} ({e}); building "
                       "without it. Check the permissions of the cache directory.")
            return None
        if entry is None:
            return None
        if expect_environment is not None and entry.meta.get("environment") != dict(expect_environment):
            self._discard(key, path, meta_bytes, "environment", "an engine cache entry written under another "
                          f"environment ({entry.meta.get('environment')})", locked)
            return None
        if not self.read_only:
            _touch(path)
        return entry

    def _discard(self, key: str, path: pathlib.Path, seen_meta: Optional[bytes], kind: str, what: str,
                 locked: bool) -> None:
        """Remove a bad entry, unless it changed since it was read (another process replaced it) or another
        process holds its lock (that process finds it bad too and replaces it)."""
        if self.read_only:  # a package's engines: its loader raises PackageError naming the file, the one message
            logger.debug("hybrid_trt: %s at %s; not loaded (read-only store, left as it is)", what, path)
            return
        with contextlib.ExitStack() as stack:
            if not locked and not stack.enter_context(self._lock(key, blocking=False)):
                return
            try:
                current = (path / _META).read_bytes()
            except OSError:
                current = None
            if current != seen_meta:
                return
            _remove(path)
        self._warn(kind, f"hybrid_trt: removed {what} at {path}; it is rebuilt. If this repeats, check the disk "
                   f"or delete {self.root}.")

    # ------------------------------------------------------------------------------------------ housekeeping

    @contextlib.contextmanager
    def _lock(self, key: str, blocking: bool) -> Iterator[bool]:
        """Hold the key's inter-process lock. Yields True when the caller may go on as the key's one builder: it
        holds the lock, or no process can hold it (something else occupies its path, see ``_lock_blocker``);
        False when it was not taken (unwritable directory, or held elsewhere and not ``blocking``)."""
        locks = self.root / "locks"
        path = locks / f"{key}.lock"
        try:
            locks.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            blocker = _lock_blocker(locks, path)
            if blocker is None:
                self._unwritable(e)
                yield False
                return
            # Every process fails here alike, so none holds the lock and going on unlocked excludes no one: at
            # worst processes compiling at once each build the entry (publishing is atomic either way). Yielding
            # False would also stop bad entries from being removed: each process rebuilt them, for good.
            if blocker == path:
                what, remove = f"lock file {path} is a directory", "that directory"
            else:
                what, remove = f"lock directory {locks} is not a directory", "that file"
            self._warn("lock path", f"hybrid_trt: the engine cache's {what}; engines are still built and cached, "
                       "but without the inter-process lock (processes compiling the same model at once may each "
                       f"build it). Remove {remove} to restore the lock.")
            yield True
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True  # closing the descriptor releases the lock
        finally:
            os.close(fd)

    def _evict(self, keep: str) -> None:
        """Remove least recently used entries (never ``keep``) until the store fits ``max_bytes``; best effort."""
        entries, total, now = [], 0, time.time()
        try:
            for shard in (self.root / f"v{FORMAT}").iterdir():
                if not shard.is_dir():  # a stray file (a note, an editor's backup): not ours to count or remove;
                    continue            # listing it failed the whole pass and turned eviction off for good
                for path in shard.iterdir():
                    try:
                        if path.name.startswith("."):  # debris of a process that died mid-write or mid-remove
                            if path.name.startswith(".trash-") or now - path.stat().st_mtime > _DEBRIS_AGE_S:
                                shutil.rmtree(path, ignore_errors=True)
                            continue
                        size = sum(f.stat().st_size for f in path.iterdir())
                        entries.append((_last_used_ns(path), path, size))
                        total += size
                    except OSError:
                        continue  # removed meanwhile
        except OSError as e:
            logger.debug("hybrid_trt: engine cache eviction skipped (%s)", e)
            return
        for _, path, size in sorted(entries, key=lambda e: (e[0], e[1].name)):
            if total <= self.max_bytes:
                break
            if path.name != keep:
                _remove(path)
                total -= size
                logger.debug("hybrid_trt: evicted engine cache entry %s (%d bytes)", path.name, size)

    def _unwritable(self, error: OSError) -> None:
        # A file where the cache needs a directory (ENOTDIR, EEXIST) is a stray file to remove, not a full or
        # read-only disk
        stray = _stray_file(error.filename) if error.errno in (errno.ENOTDIR, errno.EEXIST) else None
        fix = (f"Remove the file {stray} (the cache needs a directory there)" if stray else
               "Free space or make it writable")
        self._warn("unwritable", f"hybrid_trt: cannot write to the engine cache {self.root} ({error}); engines are "
                   f"built without caching (entries already stored still load). {fix}, point the cache_dir option "
                   "(HYBRID_TRT_CACHE_DIR) elsewhere, or turn caching off (cache=False, HYBRID_TRT_CACHE=0).")

    def _warn(self, kind: str, message: str) -> None:
        if kind in self._warned:
            logger.debug("%s", message)
        else:
            self._warned.add(kind)
            logger.warning("%s", message)


def _lock_blocker(locks: pathlib.Path, path: pathlib.Path) -> Optional[pathlib.Path]:
    """What keeps the lock file ``path`` from being opened, when it is not the directory's permissions or space:
    a directory at its path (left by a tool or a hand), or a non-directory where ``locks`` belongs."""
    if path.is_dir():
        return path
    if os.path.lexists(locks) and not locks.is_dir():
        return locks
    return None


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ValueError(f"engine store: bad key {key!r} (expected a hex digest)")


def _read_meta(key: str, path: pathlib.Path) -> tuple[Optional[bytes], Optional[dict], dict]:
    """(meta.json bytes, meta, {name: (size, sha256)}), (None, None, {}) when absent; raises _Corrupt."""
    try:
        meta_bytes = (path / _META).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        if path.is_dir():  # entries are published whole, so a directory without meta.json is damaged
            raise _Corrupt("meta.json is missing", None) from None
        if os.path.lexists(path):  # a file where the entry belongs: removed, or publishing fails in every process
            raise _Corrupt("a file, not an entry directory", None) from None
        return None, None, {}
    try:
        meta = json.loads(meta_bytes)
        if meta["format"] != FORMAT or meta["key"] != key:
            raise ValueError(f"format {meta['format']}, key {meta['key']}")
        sizes = {name: (int(f["size"]), str(f["sha256"])) for name, f in meta["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise _Corrupt(f"invalid meta.json: {type(e).__name__}: {e}", meta_bytes) from None
    return meta_bytes, meta, sizes


def _open(key: str, path: pathlib.Path, on_corrupt: Callable[[bytes, str], None]
          ) -> tuple[Optional[bytes], Optional[Entry]]:
    """Like ``_read``, but each file is only opened and its size checked; LazyFiles reads and verifies it."""
    meta_bytes, meta, sizes = _read_meta(key, path)
    if meta is None:
        return None, None
    handles = {}
    try:
        for name, (size, sha) in sizes.items():
            try:
                f = open(path / name, "rb")
            except FileNotFoundError:
                if not path.is_dir():
                    return None, None  # removed meanwhile (evicted by another process): a plain miss
                raise _Corrupt(f"{name} is missing", meta_bytes) from None
            handles[name] = (f, size, sha)
            actual = os.fstat(f.fileno()).st_size
            if actual != size:
                raise _Corrupt(f"{name} has {actual} bytes, meta.json says {size}", meta_bytes)
    except BaseException:
        for f, _, _ in handles.values():
            f.close()
        raise
    files = LazyFiles(handles, lambda why: on_corrupt(meta_bytes, why))
    return meta_bytes, Entry(key, files, meta, path, sum(size for size, _ in sizes.values()))


def _read(key: str, path: pathlib.Path) -> tuple[Optional[bytes], Optional[Entry]]:
    """(meta.json bytes, verified entry), (None, None) when absent; raises _Corrupt(reason, meta bytes)."""
    meta_bytes, meta, sizes = _read_meta(key, path)
    if meta is None:
        return None, None
    files = {}
    for name, (size, sha) in sizes.items():
        try:
            data = (path / name).read_bytes()
        except FileNotFoundError:
            if not path.is_dir():
                return None, None  # removed meanwhile (evicted by another process): a plain miss
            raise _Corrupt(f"{name} is missing", meta_bytes) from None
        if len(data) != size:
            raise _Corrupt(f"{name} has {len(data)} bytes, meta.json says {size}", meta_bytes)
        if hashlib.sha256(data).hexdigest() != sha:
            raise _Corrupt(f"{name} fails its sha256 checksum", meta_bytes)
        files[name] = data
    return meta_bytes, Entry(key, files, meta, path, sum(len(d) for d in files.values()))


def _in_memory(key: str, files: Mapping[str, bytes], meta: Mapping[str, Any]) -> Entry:
    return Entry(key, dict(files), {**meta, "key": key}, None, sum(len(d) for d in files.values()))


def _write(path: pathlib.Path, data: bytes) -> None:
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())  # the data is on disk before the rename publishes it


def _fsync_dir(path: pathlib.Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _touch(path: pathlib.Path) -> None:
    """Mark the entry used now, in nanoseconds (file-system clocks tick in milliseconds: too coarse for LRU)."""
    now = time.time_ns()
    try:
        os.utime(path / _LAST_USED, ns=(now, now))
    except OSError:
        pass  # read-only cache: the order of use is just not recorded


def _last_used_ns(path: pathlib.Path) -> int:
    try:
        return (path / _LAST_USED).stat().st_mtime_ns
    except OSError:
        return path.stat().st_mtime_ns


def _remove(path: pathlib.Path) -> None:
    """Rename the entry away first (atomic: readers see it whole or gone), then delete it."""
    trash = path.parent / f".trash-{path.name}-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(path, trash)
    except OSError:
        return  # already gone
    if trash.is_dir() and not trash.is_symlink():
        shutil.rmtree(trash, ignore_errors=True)
    else:
        trash.unlink(missing_ok=True)


def _bytes_text(n: int) -> str:
    """``n`` bytes in the largest unit that keeps it at least 1 (B, KiB, MiB, GiB), two decimals past bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.2f} {unit}"
    return f"{n} B"


def _stray_file(path) -> Optional[pathlib.Path]:
    """The file (not a directory) at ``path`` or at the nearest of its parents, if any."""
    if not path:
        return None
    for candidate in (pathlib.Path(path), *pathlib.Path(path).parents):
        if candidate.exists() and not candidate.is_dir():
            return candidate
    return None
