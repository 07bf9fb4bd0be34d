"""A wheel's files, extracted once into a cache folder the real-engine harnesses share.

Extraction goes to a fresh folder beside `root` and is renamed into place whole, so concurrent
test processes (pytest-xdist workers asking for the same engine at once) never read a half-written
tree: the first rename wins and the others drop their copy. `root` holds ``.complete`` when done.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from pathlib import Path


def extract_once(wheel: Path, root: Path, wanted) -> Path:
    """`root` holding the members of `wheel` for which wanted(name) is true (extracted now unless
    an earlier extraction completed)."""
    if (root / ".complete").exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{root.name}."))
    try:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(staging, [n for n in z.namelist() if wanted(n)])
        (staging / ".complete").touch()
        if root.exists() and not (root / ".complete").exists():
            shutil.rmtree(root, ignore_errors=True)  # an interrupted extraction of an earlier run
        try:
            os.rename(staging, root)
        except OSError:  # another process put its complete copy there first
            if not (root / ".complete").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root
