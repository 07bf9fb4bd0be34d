"""Names to trace readers, like policies/registry.py: every module of this package that defines
``READER`` (a Reader) is a readable format. Format choices (``load_trace(format=)``, the CLI's
``--format``), sniffing and dispatch all derive from it, so adding a format touches one module.
"""

from __future__ import annotations

import sys

import msgspec

from ..errors import ConfigError
from ..plugins import discover
from .model import Reader

SNIFF_BYTES = 1 << 20
WHOLE_DOCUMENT_BYTES = 1 << 30  # a one-document trace is read whole anyway


def _discover() -> dict[str, Reader]:
    found = discover(__package__, __file__, "READER", Reader)
    return dict(sorted(found.items(), key=lambda item: (item[1].rank, item[0])))


READERS: dict[str, Reader] = _discover()
# Listed with the catch-all (the last asked, Mooncake) first, as the default; the others by name.
FORMATS: tuple[str, ...] = (list(READERS)[-1], *sorted(list(READERS)[:-1]))


def get_reader(name: str) -> Reader:
    reader = READERS.get(name)
    if reader is None:
        raise ConfigError(f"unknown trace format {name!r} (known: auto, {', '.join(READERS)})")
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
    wanted = {k for r in READERS.values() for k in r.sniff_keys}
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
    if (found == list(READERS)[-1] and path != "-" and len(head) == SNIFF_BYTES and head.lstrip().startswith(b"{")
            and b"\n" not in head.strip()):
        # One JSON document longer than the sniffed bytes (a Claude Code session with a large
        # field before its requests): its keys may come later; look at the whole document.
        found = _first_match(sniff_keys(_head(path, WHOLE_DOCUMENT_BYTES)))
    return found


def _first_match(keys) -> str:
    for reader in sorted(READERS.values(), key=lambda r: (r.rank, r.name)):
        if keys is not None and reader.sniff(keys):
            return reader.name
    return "mooncake"


def tried() -> str:
    """The formats auto-detection tries, in order (for messages)."""
    return ", ".join(r.name for r in sorted(READERS.values(), key=lambda r: (r.rank, r.name)))


def read(path: str, format: str, *, on_invalid: str, keep_ids: bool, **options):
    """Read one file with the named reader (options it does not take are left out)."""
    reader = get_reader(format)
    return reader.read(path, on_invalid=on_invalid, keep_ids=keep_ids,
                       **{k: v for k, v in options.items() if k in reader.options})
