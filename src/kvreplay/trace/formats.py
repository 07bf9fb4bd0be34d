"""Names to trace readers, like policies/registry.py: every module of this package that defines
``READER`` (a Reader) is a readable format. Format choices (``load_trace(format=)``, the CLI's
``--format``) come from MODULES, the format names and their modules, so that naming the formats
imports no reader (tests/trace/test_load.py checks MODULES against the modules); sniffing asks
every reader (:func:`readers` imports them), an explicit format imports its own.
"""

from __future__ import annotations

import importlib
import sys
from functools import lru_cache

import msgspec

from ..errors import ConfigError
from ..plugins import discover
from .model import Reader

SNIFF_BYTES = 1 << 20
WHOLE_DOCUMENT_BYTES = 1 << 30  # a one-document trace is read whole anyway

#: Every format and the module of its reader: the catch-all (the last asked, Mooncake) first, as
#: the default; the others by name.
MODULES = {"mooncake": "mooncake", "bailian": "bailian", "claude-code": "claude_code",
           "agentic-mooncake": "agentic_mooncake"}
FORMATS: tuple[str, ...] = tuple(MODULES)
CATCH_ALL = FORMATS[0]


def discovered() -> dict[str, Reader]:
    """Every module's READER, in the order sniffing asks them (rank, then name); imports them all."""
    found = discover(__package__, __file__, "READER", Reader)
    return dict(sorted(found.items(), key=lambda item: (item[1].rank, item[0])))


@lru_cache(maxsize=None)
def readers() -> dict[str, Reader]:
    """Every reader, in the order sniffing asks them (rank, then name)."""
    found = [get_reader(name) for name in FORMATS]
    return {r.name: r for r in sorted(found, key=lambda r: (r.rank, r.name))}


def get_reader(name: str) -> Reader:
    """The reader of format `name` (importing its module only)."""
    module = MODULES.get(name)
    if module is not None:
        return importlib.import_module(f"{__package__}.{module}").READER
    reader = readers().get(name)  # (one registered at run time)
    if reader is None:
        raise ConfigError(f"unknown trace format {name!r} (known: auto, {', '.join(FORMATS)})")
    return reader


def _head(path: str, size: int = SNIFF_BYTES) -> bytes:
    from .jsonl import open_trace

    if path == "-":
        stdin = sys.stdin.buffer
        return stdin.peek(size) if hasattr(stdin, "peek") else b""
    stream = open_trace(path)
    try:
        return stream.read(size)
    except Exception:  # noqa: BLE001 - the reader reports a corrupt file properly
        return b""
    finally:
        stream.close()


def sniff_keys(head: bytes) -> set | None:
    """The top-level keys of the first record (of those any reader looks for), None when the
    text does not start with a JSON object."""
    wanted = {k for r in readers().values() for k in r.sniff_keys}
    text = head.lstrip()
    first = text.split(b"\n", 1)[0]
    try:
        record = msgspec.json.decode(first)
    except (msgspec.DecodeError, RecursionError):
        record = None
    if isinstance(record, dict):
        return set(record.keys()) & wanted
    if not text.startswith(b"{"):
        return None
    # A document spread over lines, or a record longer than the sniffed bytes: look for the keys
    # in the text; a one-line record only counts the keys on its own line.
    keys = {k for k in wanted if b'"%s"' % k.encode() in text}
    whole_document = {"requests", "block_size"}
    if first.strip() != b"{" and not whole_document <= keys:
        keys = {k for k in keys if b'"%s"' % k.encode() in first}
    return keys


def sniff_format(path: str) -> str:
    """Guess a file's format from its first non-empty record: the first reader (in rank order)
    whose sniff accepts the record's keys; Mooncake, the catch-all, then names what is wrong.
    Standard input is sniffed from what is already buffered (gzip on stdin is read as Mooncake)."""
    head = _head(path)
    found = _first_match(sniff_keys(head))
    if (found == CATCH_ALL and path != "-" and len(head) == SNIFF_BYTES and head.lstrip().startswith(b"{")
            and b"\n" not in head.strip()):
        # One JSON document longer than the sniffed bytes (a Claude Code session with a large
        # field before its requests): its keys may come later; look at the whole document.
        found = _first_match(sniff_keys(_head(path, WHOLE_DOCUMENT_BYTES)))
    return found


def _first_match(keys) -> str:
    for reader in sorted(readers().values(), key=lambda r: (r.rank, r.name)):
        if keys is not None and reader.sniff(keys):
            return reader.name
    return "mooncake"


def tried() -> str:
    """The formats auto-detection tries, in order (for messages)."""
    return ", ".join(r.name for r in sorted(readers().values(), key=lambda r: (r.rank, r.name)))


def read(path: str, format: str, *, on_invalid: str, keep_ids: bool, **options):
    """Read one file with the named reader (options it does not take are left out)."""
    reader = get_reader(format)
    return reader.read(path, on_invalid=on_invalid, keep_ids=keep_ids,
                       **{k: v for k, v in options.items() if k in reader.options})
