"""Data files shipped with kvreplay (models.json: the KV-size catalog read by analysis/models.py)."""
