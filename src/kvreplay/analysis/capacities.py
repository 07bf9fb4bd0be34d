"""The capacities a curve is drawn at when none are given ("auto")."""

from __future__ import annotations

import numpy as np


def auto_capacities(num_blocks: int, points: int = 12, smallest: int = 16) -> list[int]:
    """Log-spaced capacities from `smallest` up to the number of unique blocks (the infinite-cache size)."""
    if num_blocks <= smallest:
        return [max(num_blocks, smallest)]
    return sorted({int(c) for c in np.round(np.geomspace(smallest, num_blocks, points))})
