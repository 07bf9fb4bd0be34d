"""Registries built from a package's modules: policies (policies/registry.py) and trace formats
(trace/formats.py) both list whatever module defines their marker object, so adding one touches
one module (and, for a policy, rewriting its index)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path


def discover(package: str, package_file: str, attr: str, kind: type, with_module: bool = False) -> dict:
    """{obj.name: obj} for every module of `package` (whose __init__ is `package_file`) that
    defines `attr` as an instance of `kind`, in module-name order; with_module: {obj.name:
    (module name, obj)}. It imports every module: the registries run it to write their index
    (policies/index.py) or once a reader is needed (trace/formats.py), never to list names."""
    found = {}
    for info in sorted(pkgutil.iter_modules([str(Path(package_file).parent)]), key=lambda i: i.name):
        obj = getattr(importlib.import_module(f"{package}.{info.name}"), attr, None)
        if isinstance(obj, kind):
            found[obj.name] = (info.name, obj) if with_module else obj
    return found
