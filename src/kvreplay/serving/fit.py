"""Would vLLM start a model on TP x GPU? (`kvreplay plan`: which TP degrees it searches, and why
one is unfit.)

vLLM 0.33.0 refuses to start when:

- the model's attention heads do not divide among the TP ranks (vllm/config/model.py,
  ``ModelConfig.verify_with_parallel_config``: "Total number of attention heads (...) must be
  divisible by tensor parallel size (...)");
- the weights leave no memory for the KV cache at ``--gpu-memory-utilization``
  (vllm/v1/core/kv_cache_planning.py ``_check_enough_kv_cache_memory``: "No available memory for
  the cache blocks"; timing/capacity.py sizes the weights as the pool does);
- the KV cache that is left cannot hold one request at ``--max-model-len``
  (the same function: "To serve at least one request with the model's max seq len ...").

A hybrid model (sliding-window, chunked-local or Mamba layers) needs less KV per max_model_len
request than every layer at full attention, so the third check counts only its full-attention
layers' KV (a lower bound of what vLLM asks, so no placement vLLM accepts is called unfit).
"""

from __future__ import annotations

from ..analysis.models import get_model, kv_bytes_per_token
from ..errors import ConfigError

#: the TP degrees a plan searches when none is given: one node's GPUs, as vLLM places them
TP_DEGREES = (1, 2, 4, 8)
#: the pipeline stages a plan adds, each on 8 GPUs (a node), for a model no TP degree starts
PP_DEGREES = (2, 4)


def unfit_reason(model, gpu: str, tp: int, *, weights_dtype: str = "bf16", kv_dtype: str | None = None,
                 gpu_memory_utilization: float | None = None, max_model_len: int | None = None,
                 pp: int = 1) -> str | None:
    """None when vLLM would start `model` on `pp` stages of `tp` x `gpu`, else why it would not (in
    words); with stages, the KV checks are the smallest stage's (timing/pipeline.py).
    gpu_memory_utilization: None (not given) is vLLM 0.33.0's default."""
    from .timing.capacity import kv_capacity
    from .timing.memory import vllm_utilization

    spec = get_model(model)
    heads = spec.num_attention_heads
    if heads % tp:
        return (f"{spec.name}'s {heads} attention heads do not divide among {tp} GPUs (vLLM requires it: "
                "vllm/config/model.py)")
    try:
        cap = kv_capacity(spec.name, gpu, tp, 1, vllm_utilization(gpu_memory_utilization), dtype=weights_dtype,
                          kv_dtype=kv_dtype or "bf16", pp=pp)
    except ConfigError as e:
        return str(e)
    limit = max_model_len if max_model_len is not None else spec.max_model_len
    if limit is None:
        return None
    layers = "full" if spec.is_hybrid else "all"
    per_token = kv_bytes_per_token(spec, kv_dtype or "bf16", layers) * cap.kv_bytes_per_token_per_gpu / \
        kv_bytes_per_token(spec, kv_dtype or "bf16", "all")
    tokens = int(cap.kv_bytes_available // per_token) if per_token else None
    if tokens is not None and tokens < limit:
        return (f"the KV cache left on each GPU ({cap.kv_bytes_available / 1e9:.1f} GB after "
                f"{cap.weight_bytes_per_gpu / 1e9:.1f} GB of weights) holds {tokens:,} tokens, fewer than one request "
                f"at max_model_len {limit:,}: vLLM refuses to start (lower --max-model-len, or more GPUs)")
    return None


def fitting_tps(model, gpu: str, **kwargs) -> list[tuple[int, str | None]]:
    """Each of TP_DEGREES with None when it fits, else why not."""
    return [(tp, unfit_reason(model, gpu, tp, **kwargs)) for tp in TP_DEGREES]
