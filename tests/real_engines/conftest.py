"""Opt-in tests against real engines' code (pytest marker ``engines``).

They download an engine's wheel from PyPI and are skipped unless asked for:
``python -m pytest -m engines tests/real_engines`` or ``KVREPLAY_ENGINES=1``; and skipped
when the package index cannot be reached.
"""

from __future__ import annotations

import os

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "engines: validation against a real engine's code (downloads its wheel; opt-in)")


def _asked_for(config) -> bool:
    return os.environ.get("KVREPLAY_ENGINES") == "1" or "engines" in (config.getoption("markexpr", "") or "")


def pytest_collection_modifyitems(config, items):
    if _asked_for(config):
        return
    skip = pytest.mark.skip(reason="engine validation is opt-in: -m engines or KVREPLAY_ENGINES=1")
    for item in items:
        if item.get_closest_marker("engines") is not None:
            item.add_marker(skip)
