"""The inert stand-ins the real-engine harnesses load an engine's source with (engine_parsers.py,
vllm_scheduler.py, test_vllm_engine.py): stub classes (any attribute is another stub; false, empty,
usable in annotations and unions) and stub packages, whose attributes are stubs except the real
submodules a harness names. Each harness subclasses StubModule with its own `real` set."""

from __future__ import annotations

import importlib
import types


class StubMeta(type):
    """Stub classes: any attribute is another stub, false, empty, usable in annotations."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return stub_class(name)

    def __bool__(cls):
        return False

    def __iter__(cls):
        return iter(())

    def __or__(cls, other):
        return cls

    __ror__ = __or__

    def __getitem__(cls, item):
        return cls


class StubBase(metaclass=StubMeta):
    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return stub_class(name)()

    def __call__(self, *args, **kwargs):
        return stub_class("result")()

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())


def stub_class(name):
    return StubMeta(str(name), (StubBase,), {})


class StubModule(types.ModuleType):
    """A stub package: its attributes are stubs, except its real submodules (`real`: full names of
    the modules loaded from the engine's source as they are)."""

    real: frozenset = frozenset()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        full = f"{self.__name__}.{name}"
        if full in self.real or any(m.startswith(full + ".") for m in self.real):
            return importlib.import_module(full)
        value = stub_class(name)
        setattr(self, name, value)
        return value
