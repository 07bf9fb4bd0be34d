"""Where the model catalog and the byte budgets used to live: a re-export of ``catalog.models``
(ModelSpec, get_model, the KV bytes per token) and ``analysis.budgets`` (sizes into blocks), so
existing imports keep working."""

from __future__ import annotations

from ..catalog.models import (ATTENTION_KINDS, KV_DTYPES, KV_LAYER_MODES, ModelSpec, catalog,  # noqa: F401
                              describe, format_params, get_model, kv_bytes_per_token, kv_dtype_bytes,
                              kv_elements_per_token, model_from_config)
from ..units import parse_size  # noqa: F401
from .budgets import (blocks_for_block_bytes, blocks_for_budget, budget_document, budget_text,  # noqa: F401
                      format_bytes, is_size, resolve_capacities)
