"""Replay engines: the reference (plain Python) and the compiled (numba) driver."""
