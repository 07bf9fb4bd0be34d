"""Data files shipped with kvreplay: GPUs, prices, the roofline calibration (the model catalog is catalog/configs/)."""
