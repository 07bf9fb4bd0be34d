"""Cache budgets in bytes turned into block counts, and the JSON ``"budget"`` object that says how.

``blocks_for_budget(budget_bytes, bytes_per_token, block_size)`` is
``floor(budget / (bytes_per_token x block_size))``: only whole blocks fit. The bytes per token are
a model's (``catalog.models.kv_bytes_per_token``) or given.
"""

from __future__ import annotations

from ..catalog.models import get_model, kv_bytes_per_token
from ..errors import ConfigError
from ..units import parse_size




def blocks_for_budget(budget_bytes: int, bytes_per_token: int, block_size: int) -> int:
    """Whole blocks of `block_size` tokens that fit in `budget_bytes`: floor(budget / (bytes_per_token * block_size))."""
    for label, value in (("budget", budget_bytes), ("bytes per token", bytes_per_token), ("block size", block_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{label} must be a positive whole number, got {value!r}")
    block_bytes = bytes_per_token * block_size
    blocks = budget_bytes // block_bytes
    if blocks == 0:
        raise ConfigError(f"a budget of {format_bytes(budget_bytes)} holds no block of {block_size} tokens "
                          f"({format_bytes(block_bytes)} each at {bytes_per_token:,} bytes per token)")
    return blocks


def format_bytes(n: int) -> str:
    """A byte count in binary units for people: 85899345920 -> "80 GiB", 1536 -> "1.5 KiB"."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            text = f"{n / scale:.2f}".rstrip("0").rstrip(".")
            return f"{text} {unit}"
    return f"{n} B"


def budget_document(bytes_per_token: int, block_size: int, capacities, *, requested=None, model=None,
                    kv_dtype: str | None = None, layers: str = "all", layout=None) -> dict:
    """The JSON ``"budget"`` object: how byte sizes map to the block counts that were replayed.

    capacities: the block counts replayed. requested: for each, the size asked for (text) or None
    when it was given in blocks. Each capacity lists its ``cache_bytes`` (blocks x block_size x
    bytes_per_token, at most the budget) and, when a size was asked for, ``budget_bytes``.
    """
    spec = get_model(model) if model is not None else None
    requested = list(requested) if requested is not None else [None] * len(capacities)
    rows = []
    per_block = int(bytes_per_token) * int(block_size) if layout is None else layout.bytes_per_block
    for blocks, asked in zip(capacities, requested):
        row = {"cache_capacity_blocks": int(blocks), "cache_bytes": int(blocks) * per_block}
        if asked is not None:
            row.update(requested=str(asked), budget_bytes=parse_size(asked))
        rows.append(row)
    return {
        "model": spec.name if spec else None,
        "hf_id": spec.hf_id if spec else None,
        "kv_dtype": kv_dtype if spec else None,
        "kv_layers": layers if spec else None,
        "bytes_per_token": int(bytes_per_token),
        "block_size": int(block_size),
        "bytes_per_block": per_block,
        "capacities": rows,
        # hybrid semantics only (a full-semantics budget keeps its fields)
        **({} if layout is None else {"kv_semantics": "hybrid", "kv_engine": layout.engine,
                                      "kv_layout": layout.text(), "vllm_block_size": layout.vllm_block_size}),
    }


def is_size(capacity) -> bool:
    """True for a capacity given as a size with a unit ("80GiB"), False for a block count."""
    return isinstance(capacity, str) and not capacity.strip().isdigit()


def resolve_capacities(capacities, block_size: int, *, model=None, kv_dtype: str | None = None,
                       layers: str | None = None, bytes_per_token: int | None = None, layout=None):
    """Block counts for `capacities` (ints, digit strings, or sizes like "80GiB"), and the budget.

    Sizes are converted with ``blocks_for_budget`` at `block_size` and the bytes per token of
    `model` (at `kv_dtype`, default bf16, and `layers`, default "all") or the given
    `bytes_per_token`. `layout` (catalog.kv_groups.Layout, hybrid semantics): a block id costs
    its ``bytes_per_block`` instead (vLLM's groups in one pool). Returns ``(blocks, budget)``:
    budget is the ``budget_document`` when a model or bytes_per_token was given, else None. A size
    with neither raises ConfigError.
    """
    if model is not None and bytes_per_token is not None:
        raise ConfigError("give a model or bytes_per_token, not both")
    if model is None and (kv_dtype is not None or layers is not None):
        raise ConfigError("kv_dtype and layers describe a model's KV cache: they need a model")
    capacities = list(capacities)
    if model is not None:
        if kv_dtype is not None and not isinstance(kv_dtype, str):
            raise ConfigError(f"kv_dtype (--kv-dtype) must be a dtype's name such as bf16 or fp8, got {kv_dtype!r}")
        kv_dtype = (kv_dtype or "bf16").strip().lower()
        layers = layers or "all"
        bytes_per_token = kv_bytes_per_token(model, kv_dtype, layers)
    elif bytes_per_token is None:
        sizes = [c for c in capacities if is_size(c)]
        if sizes:
            raise ConfigError(f"capacity {sizes[0]!r} is a size in bytes: turning it into blocks needs a model "
                              "or a number of KV bytes per token")
        return [int(c) for c in capacities], None
    blocks, requested = [], []
    for c in capacities:
        if is_size(c):
            blocks.append(blocks_for_budget(parse_size(c), int(bytes_per_token), int(block_size)) if layout is None
                          else blocks_for_block_bytes(parse_size(c), layout.bytes_per_block, block_size))
            requested.append(c.strip())
        else:
            blocks.append(int(c))
            requested.append(None)
    budget = budget_document(int(bytes_per_token), int(block_size), blocks, requested=requested, model=model,
                             kv_dtype=kv_dtype, layers=layers or "all", layout=layout)
    return blocks, budget


def blocks_for_block_bytes(budget_bytes: int, block_bytes: int, block_size: int) -> int:
    """Whole block ids of `block_bytes` each in `budget_bytes` (a hybrid layout's blocks)."""
    blocks = budget_bytes // block_bytes
    if blocks == 0:
        raise ConfigError(f"a budget of {format_bytes(budget_bytes)} holds no block id of {block_size} tokens "
                          f"({format_bytes(block_bytes)} each in the model's hybrid layout)")
    return blocks


def budget_text(budget: dict) -> str:
    """One line saying what a budget's bytes per token stand for."""
    if budget.get("kv_semantics") == "hybrid":
        return (f"KV {budget['model']}, {budget['kv_dtype']}, hybrid layout: {budget['kv_layout']} "
                f"({format_bytes(budget['bytes_per_block'])} per block)")
    what = (f"{budget['model']}, {budget['kv_dtype']}, "
            + ("every layer" if budget["kv_layers"] == "all" else "full-attention layers only")
            if budget["model"] else "as given")
    return (f"KV {budget['bytes_per_token']:,} B/token ({what}), "
            f"{format_bytes(budget['bytes_per_block'])} per {budget['block_size']}-token block")
