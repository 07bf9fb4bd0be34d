"""Replay engines: the reference (plain Python) and the compiled (C) driver, and their result, the Report."""
