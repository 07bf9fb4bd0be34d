"""The catalogs, in one place: models (models.py: ModelSpec, get_model, the config.json reader
hf_config.py and the bundled config.json files in configs/), their KV layer groups and the engines'
layouts of them (kv_groups.py), GPUs (gpus.py: GPUSpec, get_gpu) and prices (prices.py). One
lookup and one "did you mean" for every name (lookup.py)."""
