"""The catalogs' one lookup: an index of every name and alias (case-insensitive) of a catalog's
entries, and the "did you mean" its unknown names get. Models (models.py) and GPUs (gpus.py) use it."""

from __future__ import annotations

import difflib


def index_by_name(entries) -> dict:
    """{name or alias, lowercased: entry}, the first entry to claim a name keeping it; each entry
    has .names()."""
    index: dict = {}
    for entry in entries:
        for name in entry.names():
            index.setdefault(name.lower(), entry)
    return index


def did_you_mean(key: str, index: dict, *, n: int, cutoff: float) -> str:
    """"; did you mean A, B, C?" naming up to three entries (by their .name) closest to `key` among
    the n closest names of `index` at `cutoff` (difflib's ratio), or "" when none is close."""
    close = difflib.get_close_matches(key, list(index), n=n, cutoff=cutoff)
    suggestions = list(dict.fromkeys(index[c].name for c in close))[:3]
    return f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
