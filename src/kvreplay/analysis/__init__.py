"""Analysis over replays: sweeps and their executors, the one-pass LRU curve, trace statistics, metrics, the KV-size model catalog, the HTML report's data."""
