"""The inert stand-ins the real-engine harnesses load an engine's source with (engine_parsers.py,
vllm_scheduler.py, sglang_scheduler.py, test_vllm_engine.py, test_radix_engine.py,
test_sglang_hybrid.py): stub classes (any attribute is another stub; false, empty, usable in
annotations and unions) and stub packages, whose attributes are stubs except the real submodules a
harness names. Each harness subclasses StubModule with its own `real` set.

Stub classes come in families (:class:`Stubs`): one class per qualified name read (reading the same
name twice gives the same class), and, when a family is given a `reads` dict, every name read
through one of its stubs is counted there (sglang_scheduler.py checks a run reads no stub beyond an
allowed list)."""

from __future__ import annotations

import contextlib
import importlib
import sys
import types


class StubMeta(type):
    """Stub classes: any attribute is another stub, false, empty, usable in annotations."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return cls._stubs.read(f"{cls.__qualname__}.{name}")

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
    """A stub instance: constructible with anything, callable, false, empty."""

    def __init__(self, *args, **kwargs):
        pass

    def __init_subclass__(cls, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._stubs.read(f"{type(self).__qualname__}().{name}")()

    def __call__(self, *args, **kwargs):
        return self._stubs.read(f"{type(self).__qualname__}()()")()

    def __bool__(self):
        return False

    def __len__(self):
        return 0

    def __iter__(self):
        return iter(())


class Stubs:
    """A family of stub classes, one per qualified name; `reads` (a dict), when given, counts every
    name read through the family's stubs."""

    def __init__(self, reads: dict | None = None):
        self.reads, self.classes = reads, {}

    def cls(self, name) -> type:
        name = str(name)
        made = self.classes.get(name)
        if made is None:
            made = StubMeta(name.rsplit(".", 1)[-1], (StubBase,), {"_stubs": self, "__qualname__": name})
            self.classes[name] = made
        return made

    def read(self, what: str) -> type:
        if self.reads is not None:
            self.reads[what] = self.reads.get(what, 0) + 1
        return self.cls(what)


StubBase._stubs = Stubs()


def stub_class(name) -> type:
    return StubBase._stubs.cls(name)


NOT_OVERRIDDEN = object()


class StubModule(types.ModuleType):
    """A stub package: its attributes are stubs (of the family `stubs`, named by their full name),
    except its real submodules (`real`: full names of the modules loaded from the engine's source as
    they are) and what `override` gives."""

    real: frozenset = frozenset()
    stubs: Stubs = StubBase._stubs

    def override(self, name):
        """A harness's own value for attribute `name` of this package (NOT_OVERRIDDEN: a stub)."""
        return NOT_OVERRIDDEN

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        full = f"{self.__name__}.{name}"
        if full in self.real or any(m.startswith(full + ".") for m in self.real):
            return importlib.import_module(full)
        value = self.override(name)
        if value is NOT_OVERRIDDEN:
            value = self.stubs.cls(full)
        setattr(self, name, value)
        return value


@contextlib.contextmanager
def engine_modules(owner, owned, front, fallback=None, path=None):
    """While the block runs, the engine's modules are `owner.saved` (kept there between blocks, so
    lazy imports inside the engine keep working) and `front` (and `fallback`, last) find the rest;
    `path` (a folder) is first on sys.path. Whatever `owned(name, module)` claims that was loaded
    before is set aside and put back after."""
    clashes = {n: sys.modules.pop(n) for n in list(sys.modules) if owned(n, sys.modules[n])}
    sys.modules.update(owner.saved)
    sys.meta_path.insert(0, front)
    if fallback is not None:
        sys.meta_path.append(fallback)
    if path is not None:
        sys.path.insert(0, str(path))
    try:
        yield
    finally:
        if path is not None:
            sys.path.remove(str(path))
        if fallback is not None:
            sys.meta_path.remove(fallback)
        sys.meta_path.remove(front)
        owner.saved = {n: sys.modules.pop(n) for n in list(sys.modules) if owned(n, sys.modules[n])}
        sys.modules.update(clashes)
