"""Several output files, all or nothing (`plan -o X --plot Y`, `simulate`, `sweep`, `mrc`): every
file's bytes are rendered before this is called; each is written to a temporary file beside it,
and only when all are written are they renamed into place. If any write or rename fails (a full
disk, SIGTERM), the temporary files are removed and the files already renamed are put back as
they were, so no output of the failed command is left (files.py has the one-file case).

A symlinked output is written through, as files.atomic_output does; a named pipe or a device
(/dev/stdout) is written into, first, since what is written there cannot be taken back.
"""

from __future__ import annotations

import os
import stat
import tempfile

from ..errors import OutputError


def write_all(files: dict) -> None:
    """Write {path: bytes} so that either every file holds its new bytes or none changed."""
    staged, renamed = [], []  # (temporary, target); (target, backup or None)
    current = backup = None
    try:
        devices = []
        for path, data in files.items():
            current = path = os.fspath(path)
            if os.path.isdir(path):
                raise OutputError(path, "is a directory, expected a file name")
            target = os.path.realpath(path)
            if os.path.exists(target) and not stat.S_ISREG(os.stat(target).st_mode):
                devices.append((path, target, data))
                continue
            fd, tmp = tempfile.mkstemp(prefix=".kvreplay-", suffix=".tmp", dir=os.path.dirname(target))
            staged.append((tmp, target))
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        for path, target, data in devices:
            current = path
            with open(target, "wb") as out:
                out.write(data)
        for tmp, target in staged:
            current = target
            backup = None
            if os.path.exists(target):
                backup = tmp + ".old"
                try:
                    os.link(target, backup)  # (to put it back if a later rename fails)
                except OSError:
                    backup = None
            os.replace(tmp, target)
            renamed.append((target, backup))
            backup = None
    except BaseException as e:
        for tmp, _ in staged:
            _remove(tmp)
        if backup is not None:  # (the target whose rename failed is as it was)
            _remove(backup)
        for target, backup in reversed(renamed):
            if backup is not None:
                os.replace(backup, target)
            else:
                _remove(target)
        renamed = []
        if isinstance(e, OSError):
            raise OutputError(current, f"cannot write: {e.strerror or e}; no output was written") from None
        raise
    finally:
        for _, backup in renamed:
            if backup is not None:
                _remove(backup)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
