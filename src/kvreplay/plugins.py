"""Registries built from a package's modules: policies (policies/registry.py) and trace formats
(trace/formats.py) both list whatever module defines their marker object, so adding one touches
one module."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path


def discover(package: str, package_file: str, attr: str, kind: type) -> dict:
    """{obj.name: obj} for every module of `package` (whose __init__ is `package_file`) that
    defines `attr` as an instance of `kind`, in module-name order."""
    found = {}
    for info in sorted(pkgutil.iter_modules([str(Path(package_file).parent)]), key=lambda i: i.name):
        obj = getattr(importlib.import_module(f"{package}.{info.name}"), attr, None)
        if isinstance(obj, kind):
            found[obj.name] = obj
    return found
