"""Writing output files: atomically, so a failed run never leaves a partial file."""

from __future__ import annotations

import gzip
import os
import tempfile
from contextlib import contextmanager

from .errors import OutputError


@contextmanager
def atomic_output(path: str, *, compress: bool = False):
    """A binary stream for `path`: a temporary file in the same directory, renamed over `path` when
    the block ends without error and deleted otherwise, so readers see the old file or the whole
    new one, never a partial one. `compress`: gzip (with mtime 0 and no name in the header, so the
    same content always gives the same bytes)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise OutputError(path, "is a directory, expected a file name")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".kvreplay-", suffix=".tmp", dir=directory)
    except OSError as e:
        raise OutputError(path, f"cannot write: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb", buffering=1 << 20) as raw:
            if compress:
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as zipped:
                    yield zipped
            else:
                yield raw
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


def write_atomic(path: str, data: bytes) -> None:
    """Write `data` to `path` atomically (see atomic_output)."""
    with atomic_output(path) as out:
        out.write(data)
