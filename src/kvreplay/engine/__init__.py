"""Replay engines: the reference (plain Python) and the compiled (numba) driver, and their result, the Report."""
