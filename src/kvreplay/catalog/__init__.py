"""The model catalog: ModelSpec, the config.json reader, and the bundled config.json files (configs/)."""
