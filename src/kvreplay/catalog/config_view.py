"""Checked reads of one Hugging Face ``config.json``: every value the reader uses is type- and
range-checked here, and a bad one raises ``ModelConfigError`` naming the file and the key.

The file is untrusted: it must be a JSON object of at most ``MAX_CONFIG_BYTES``; integers are whole
JSON numbers (``4096`` or ``4096.0``, never ``true``, ``"4096"`` or ``1e400``) inside the bounds each
key states; a nested section (``text_config``, ``quantization_config``) is a JSON object too.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from ..errors import ConfigError

MAX_CONFIG_BYTES = 4 * 2**20
_MISSING = object()


class ModelConfigError(ConfigError):
    """A config.json kvreplay cannot read: ``path: key: what is wrong`` (key None: the whole file)."""

    def __init__(self, path: str, key: str | None, msg: str):
        self.path = path
        self.key = key
        self.msg = msg
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.path}: {self.key}: {self.msg}" if self.key else f"{self.path}: {self.msg}"


def config_file(path) -> Path:
    """The config.json `path` names: the file itself, or ``config.json`` in a model directory."""
    p = Path(os.path.expanduser(str(path)))
    if p.is_dir():
        inner = p / "config.json"
        if not inner.is_file():
            raise ModelConfigError(str(path), None, "a directory without a config.json")
        return inner
    if not p.exists():
        raise ModelConfigError(str(path), None, "no such file or directory")
    if not p.is_file():
        raise ModelConfigError(str(path), None, "not a regular file")
    return p


def read_json(path, shown: str | None = None) -> dict:
    """The JSON object in `path` (at most MAX_CONFIG_BYTES); errors name it as `shown`."""
    where = shown or str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ModelConfigError(where, None, f"cannot be read ({e.strerror or e})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ModelConfigError(where, None, f"larger than {MAX_CONFIG_BYTES // 2**20} MiB: not a config.json")
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ModelConfigError(where, None, "not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise ModelConfigError(f"{where}:{e.lineno}", None, f"not valid JSON ({e.msg})") from None
    except RecursionError:
        raise ModelConfigError(where, None, "nested too deeply") from None
    if not isinstance(raw, dict):
        raise ModelConfigError(where, None, f"a config.json holds a JSON object, not a {type(raw).__name__}")
    return raw


class ConfigView:
    """Typed reads of one JSON object of a config.json; `prefix` names nested sections in errors."""

    def __init__(self, raw: dict, path: str, prefix: str = ""):
        self.raw = raw
        self.path = path
        self.prefix = prefix

    def name(self, key: str) -> str:
        return self.prefix + key

    def error(self, key: str, msg: str) -> ModelConfigError:
        return ModelConfigError(self.path, self.name(key), msg)

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def value(self, key: str, default=_MISSING):
        v = self.raw.get(key)
        if v is None:
            if default is _MISSING:
                raise self.error(key, "missing (needed to size the model)")
            return default
        return v

    def int(self, key: str, default=_MISSING, *, lo: int = 1, hi: int = 2**31) -> int:
        v = self.value(key, default)
        if v is default and default is not _MISSING:
            return v
        return self.check_int(key, v, lo, hi)

    def check_int(self, key: str, v, lo: int, hi: int) -> int:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.error(key, f"must be a whole number, got {json.dumps(v)[:40]}")
        if isinstance(v, float):
            if not math.isfinite(v) or v != int(v):
                raise self.error(key, f"must be a whole number, got {v!r}")
            v = int(v)
        if v < lo:
            raise self.error(key, f"must be at least {lo:,}, got {v:,}")
        if v > hi:
            raise self.error(key, f"{v:,} is beyond any real model (at most {hi:,})")
        return v

    def number(self, key: str, default, *, lo: float, hi: float) -> float:
        v = self.value(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.error(key, f"must be a number, got {json.dumps(v)[:40]}")
        if not lo <= v <= hi:
            raise self.error(key, f"must be between {lo:g} and {hi:g}, got {v:g}")
        return float(v)

    def bool(self, key: str, default: bool) -> bool:
        v = self.value(key, default)
        if not isinstance(v, bool):
            raise self.error(key, f"must be true or false, got {json.dumps(v)[:40]}")
        return v

    def string(self, key: str, default=_MISSING) -> str:
        v = self.value(key, default)
        if not isinstance(v, str) or len(v) > 200:
            raise self.error(key, f"must be a short string, got {json.dumps(v)[:40]}")
        return v

    def int_list(self, key: str, *, lo: int = 0, hi: int = 2**31, length: int | None = None) -> list[int] | None:
        """The list of whole numbers under `key`, or None when absent."""
        v = self.raw.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or len(v) > 100_000:
            raise self.error(key, f"must be a list of whole numbers, got {json.dumps(v)[:40]}")
        if length is not None and len(v) != length:
            raise self.error(key, f"has {len(v)} entries, one a layer needs {length}")
        return [self.check_int(f"{key}[{i}]", x, lo, hi) for i, x in enumerate(v)]

    def string_list(self, key: str, length: int) -> list[str] | None:
        v = self.raw.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.error(key, f"must be a list of strings, got {json.dumps(v)[:40]}")
        if len(v) != length:
            raise self.error(key, f"has {len(v)} entries for {length} layers (num_hidden_layers)")
        return v

    def section(self, key: str):
        """The nested object under `key` as a ConfigView, or None when absent."""
        v = self.raw.get(key)
        if v is None:
            return None
        if not isinstance(v, dict):
            raise self.error(key, f"must be a JSON object, got {json.dumps(v)[:40]}")
        return ConfigView(v, self.path, f"{self.prefix}{key}.")
