"""Prices moved to kvreplay.catalog.prices; this name stays for tests/serving/test_floors.py (being
fixed on main meanwhile) until it imports it from there. Nothing in src/ imports it."""

from ..catalog.prices import Prices  # noqa: F401
