"""`plan --cache DIR`: the runs a plan keeps on disk, keyed by the content of everything that shapes
them, so that a later plan reuses a run only when it would simulate the very same one.

An entry's key holds kvreplay's version, the entry format, the roofline calibration's digest, the
trace's digest, and the run's configuration and options, with every option that names a file
(a --time-model profile, a --rate-profile, a --model config.json) replaced by the sha256 of that
file's bytes: edit the file and no run made from its old content is reused. The file's name is the
key's sha256; the entry stores the key itself and a sha256 over the key and its arrays, and both
are checked on read, so an entry renamed from another configuration, forged, truncated or damaged
is ignored with a warning and simulated again, never believed.

Entries are written atomically (a temporary file in DIR, renamed over the entry's name) and never
through a symbolic link: a link at an entry's name is replaced by the entry, its target untouched.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import pickle
import re
import stat
import tempfile
import warnings
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..version import __version__

#: the entry format: 5 since an entry stores its key and a checksum (and its key holds the content of
#: the files its options name)
FORMAT = 5
#: the per-request arrays of an entry, with their dtype kinds (f: float, b: bool)
ARRAYS = {"arrival_s": "f", "ttft_s": "f", "tpot_s": "f", "e2e_s": "f", "finished": "b"}


def prepare(cache_dir) -> str:
    """`cache_dir` as a path, created when missing; ConfigError naming --cache when it is not a
    path, is a file or a device, or cannot be created."""
    if isinstance(cache_dir, bool) or not isinstance(cache_dir, (str, os.PathLike)):
        raise ConfigError(f"cache_dir (--cache) must be a directory's path, got {cache_dir!r}")
    path = os.fspath(cache_dir)
    if not path.strip():
        raise ConfigError("cache_dir (--cache) must be a directory's path, got an empty name")
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"--cache {path}: not a directory (the cache keeps one file per run in a directory)")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--cache {path}: cannot create the directory: {e.strerror or e}") from None
    sweep(path)
    return path


#: an entry's temporary file while it is written: its writer's process id in its name (write)
TEMPORARY = re.compile(r"\.kvreplay-(\d+)-.*\.tmp")


def sweep(cache_dir: str) -> None:
    """Remove the temporary files of writers that are no longer running: a plan's worker process dies
    of SIGTERM at once (no cleanup runs there), so one stopped between creating its entry's temporary
    file and renaming it leaves the file behind; the plan sweeps them when it stops and when it starts.
    A live writer's (another plan on the same cache) is left alone."""
    try:
        names = os.listdir(cache_dir)
    except OSError:
        return
    for name in names:
        m = TEMPORARY.fullmatch(name)
        if m and not _running(int(m.group(1))):
            try:
                os.unlink(os.path.join(cache_dir, name))
            except OSError:
                pass


def _running(pid: int) -> bool:
    """Whether process `pid` exists (a zombie counts: its parent has not collected it yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (another user's: it exists)
        return True
    return True


def content(value: Any):
    """What a key records of one option: JSON values as they are, a file's name as the sha256 of its
    bytes (a model directory's by its config.json), anything else by the sha256 of its pickle; None
    when it cannot be recorded (the run is then not cached)."""
    if isinstance(value, str):
        path = value
        if os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json")):
            path = os.path.join(path, "config.json")
        if os.path.isfile(path):
            try:
                with open(path, "rb") as f:
                    return {"file_sha256": hashlib.sha256(f.read()).hexdigest()}
            except OSError:
                return None
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        items = [content(v) for v in value]
        return None if any(i is None and v is not None for i, v in zip(items, value)) else items
    try:
        return {"pickle_sha256": hashlib.sha256(pickle.dumps(value, protocol=4)).hexdigest()}
    except Exception:  # noqa: BLE001 - an object that cannot be pickled cannot be keyed
        return None


def recorded(parts: dict) -> dict | None:
    """`parts` with every value's content (content()), kvreplay's version and the entry format; None
    (with a warning) when some part cannot be recorded, so that no run is cached."""
    out = {}
    for name, value in parts.items():
        c = content(value)
        if c is None and value is not None:
            warnings.warn(f"--cache: {name} holds a Python object that cannot be keyed by its content; this plan's "
                          "runs are not kept", stacklevel=3)
            return None
        out[name] = c
    return {**out, "kvreplay": __version__, "format": FORMAT}


def key_text(base: dict, run: dict) -> str:
    """An entry's key: what every run of a plan shares (recorded()) and this run's own JSON parts
    (its configuration, instances, load, band end), as canonical JSON."""
    return json.dumps({**base, **run}, sort_keys=True, separators=(",", ":"))


def path_of(cache_dir: str, key: str) -> str:
    return os.path.join(cache_dir, hashlib.sha256(key.encode()).hexdigest()[:32] + ".npz")


def _checksum(key: str, arrays: dict, doc: bytes) -> str:
    h = hashlib.sha256(key.encode())
    for name in ARRAYS:
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode() + str(a.dtype).encode() + a.tobytes())
    h.update(doc)
    return h.hexdigest()


def _warn(path: str, why: str) -> None:
    warnings.warn(f"--cache {path}: {why}; ignored and simulated again", stacklevel=3)


def read(path: str, key: str, num_requests: int) -> dict | None:
    """The entry at `path` as {"arrays": ..., "doc": ...} when it holds a run under `key` for
    `num_requests` requests; None (with a warning when something other than nothing is there)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        _warn(path, f"cannot be read ({e.strerror or e})")
        return None
    if stat.S_ISLNK(st.st_mode):
        _warn(path, "a symbolic link, not an entry this cache wrote")
        return None
    if not stat.S_ISREG(st.st_mode):
        _warn(path, "not a regular file")
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            data = f.read()
    except OSError as e:
        _warn(path, f"cannot be read ({e.strerror or e})")
        return None
    why, entry = _decode(data, key, num_requests)
    if why is not None:
        _warn(path, why)
        return None
    return entry


def _decode(data: bytes, key: str, num_requests: int) -> tuple[str | None, dict | None]:
    """(why the bytes are not an entry for `key`, None) or (None, the entry)."""
    if not data:
        return "empty", None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            stored = {name: z[name] for name in z.files}
    except Exception as e:  # noqa: BLE001 - any damage (zip, npy header, truncation) means "not an entry"
        return f"not a cache entry (unreadable as .npz: {type(e).__name__})", None
    missing = [name for name in (*ARRAYS, "doc", "key", "checksum") if name not in stored]
    if missing:
        return f"not an entry of this kvreplay's cache (no {', '.join(missing)})", None
    try:
        stored_key = stored["key"].tobytes().decode()
        checksum = stored["checksum"].tobytes().decode()
    except (UnicodeDecodeError, ValueError):
        return "its key is not text", None
    if stored_key != key:
        return "its key is another run's (renamed, or written for other inputs)", None
    for name, kind in ARRAYS.items():
        a = stored[name]
        if a.ndim != 1 or a.dtype.kind != kind or a.size != num_requests:
            return f"{name} is not {num_requests} values of the run's kind", None
    doc_bytes = stored["doc"].tobytes()
    if checksum != _checksum(key, stored, doc_bytes):
        return "its content does not match its checksum (edited or damaged)", None
    try:
        doc = json.loads(doc_bytes.decode())
    except (UnicodeDecodeError, ValueError):
        return "its summary is not JSON", None
    if not (isinstance(doc, dict) and isinstance(doc.get("policy"), str) and isinstance(doc.get("summary"), dict)
            and isinstance(doc.get("warmup_s", 0.0), (int, float)) and np.isfinite(doc.get("warmup_s", 0.0))):
        return "its summary is not a run's", None
    return None, {"arrays": {name: stored[name] for name in ARRAYS}, "doc": doc}


def write(path: str, key: str, arrays: dict, doc: dict) -> None:
    """Store an entry atomically at `path` (replacing a symbolic link there, never writing through
    it); a failure to write warns and leaves the cache as it was."""
    doc_bytes = json.dumps(doc, default=float).encode()
    buf = io.BytesIO()
    np.savez(buf, **arrays, doc=np.frombuffer(doc_bytes, dtype=np.uint8),
             key=np.frombuffer(key.encode(), dtype=np.uint8),
             checksum=np.frombuffer(_checksum(key, arrays, doc_bytes).encode(), dtype=np.uint8))
    directory = os.path.dirname(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".kvreplay-{os.getpid()}-", suffix=".tmp", dir=directory)  # (sweep)
        with os.fdopen(fd, "wb") as f:
            f.write(buf.getvalue())
        if os.path.isdir(path) and not os.path.islink(path):
            raise IsADirectoryError(errno.EISDIR, "a directory is in the way")
        os.replace(tmp, path)  # (a symlink at `path` is replaced itself, its target untouched)
        tmp = None
    except OSError as e:
        warnings.warn(f"--cache {path}: cannot store the run ({e.strerror or e}); the plan goes on without it",
                      stacklevel=2)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
