"""Analysis over replays: sweeps."""
