"""Writing output files: atomically, so a failed run never leaves a partial file."""

from __future__ import annotations

import gzip
import os
import stat
import tempfile
import zlib
from contextlib import contextmanager

from .errors import OutputError


@contextmanager
def atomic_output(path: str, *, compress: bool = False):
    """A binary stream for `path`: a temporary file in the same directory, renamed over `path` when
    the block ends without error and deleted otherwise (also on SIGTERM: the CLI turns it into
    an exception), so readers see the old file or the whole new one, never a partial one. A
    symlink is written through (its target is replaced); a named pipe or device is written into.
    `compress`: gzip (with mtime 0 and no name in the header, so the same content always gives the
    same bytes)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise OutputError(path, "is a directory, expected a file name")
    target = os.path.realpath(path)  # a symlink is written through, not replaced
    if os.path.exists(target) and not stat.S_ISREG(os.stat(target).st_mode):
        # A named pipe or a device (/dev/stdout): write into it; there is nothing to replace.
        try:
            with open(target, "wb") as raw, _maybe_gzip(raw, compress) as out:
                yield out
        except OSError as e:
            raise OutputError(path, f"cannot write: {e.strerror or e}") from None
        return
    path = target
    directory = os.path.dirname(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".kvreplay-", suffix=".tmp", dir=directory)
    except OSError as e:
        raise OutputError(path, f"cannot write: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as raw, _maybe_gzip(raw, compress) as out:
            yield out
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError):
            raise OutputError(path, f"cannot write: {e.strerror or e}") from None
        raise


@contextmanager
def _maybe_gzip(raw, compress: bool):
    """`raw`, or a gzip stream over it that is closed (its trailer written) when the block ends."""
    if not compress:
        yield raw
        return
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as zipped:
        yield zipped


def write_atomic(path: str, data: bytes) -> None:
    """Write `data` to `path` atomically (see atomic_output)."""
    with atomic_output(path) as out:
        out.write(data)


def open_input(path: str, error, what: str, missing: str = "no such file"):
    """A binary stream over an input file, gunzipped when its first bytes are gzip's magic;
    `error(path, message)` (a kvreplay error class taking the path) when it is missing, a
    directory (`what`: what was expected instead) or cannot be opened."""
    try:
        raw = open(path, "rb")
    except FileNotFoundError:
        raise error(path, missing) from None
    except IsADirectoryError:
        raise error(path, f"is a directory, expected {what}") from None
    except OSError as e:
        raise error(path, f"cannot open: {e.strerror}") from None
    if raw.peek(2)[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw)
    return raw


def read_text(path: str, error, what: str, missing: str = "no such file") -> str:
    """A small input file's UTF-8 text (open_input's errors; `error` too when it is not UTF-8)."""
    with open_input(path, error, what, missing) as f:
        try:
            return f.read().decode("utf-8")
        except (OSError, EOFError, zlib.error) as e:  # a truncated or corrupt gzip stream
            raise error(path, f"truncated or corrupt gzip data ({e})") from None
        except UnicodeDecodeError as e:
            raise error(path, f"not UTF-8 text (byte {e.start})") from None
