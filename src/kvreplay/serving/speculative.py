"""Speculative decoding: the method, k draft tokens a step, and the acceptance model.

A decoding request proposes k draft tokens after each step (n-gram lookup, an EAGLE head, the
model's MTP module, or a draft model); the next step verifies them with the token sampled last,
1 + k query tokens, and keeps the longest accepted prefix plus the target model's own token.
With conditional acceptance rates a_1..a_k (a_p: position p is accepted given every position
before it was), a step outputs

    E[tokens per step] = 1 + a_1 + a_1 a_2 + ... + a_1 ... a_k.

vLLM's spec-decode metrics print "acceptance at token p" (or "Per-position acceptance") as the
fraction of drafts whose first p + 1 tokens were all accepted: the products above, not the
conditional rates. The table below stores conditional rates, converted from such figures where
that is what a source gives (u_p / u_{p-1}); each entry cites its source. Positions beyond a
source's last repeat its last conditional rate (the row says so).

The serving kernel (kernel/vllm.c, batch.c) schedules a decoding request with 1 + k tokens and
its drafter's lookahead slots, as vLLM 0.33.0 does, and draws each request's acceptances from a
seeded generator (per request and output position, so runs compare request by request).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..catalog.models import get_model
from ..errors import ConfigError
from .timing.models import _weight_bytes, kv_bytes_per_token_per_gpu

METHODS = ("ngram", "eagle", "mtp", "draft")
#: k at most (vLLM has no hard limit; published per-position figures stop at 8)
MAX_K = 16

_DSV3 = "https://arxiv.org/abs/2412.19437"
_V4_PR = "https://github.com/vllm-project/vllm/pull/41044"
_EAGLE3_PR = "https://github.com/vllm-project/vllm/pull/42764"
_NGRAM_PR = "https://github.com/vllm-project/vllm/pull/24344"


@dataclass(frozen=True)
class Published:
    """One method's published acceptance: conditional rates per position, where they come from."""

    rates: tuple[float, ...]
    source: str
    low: tuple[float, ...] | None = None   # the source's range, where it gives one
    high: tuple[float, ...] | None = None


#: (method, model family or None for the method's default) -> Published. A model family matches a
#: catalog model whose name starts with it.
PUBLISHED = {
    ("mtp", "DeepSeek-V3"): Published(
        rates=(0.875, 0.3807 / 0.7694),
        low=(0.85, 0.3807 / 0.7694), high=(0.90, 0.3807 / 0.7694),
        source=f"position 1: DeepSeek-V3 technical report, section 5.4.3 ({_DSV3}): 'the acceptance rate of the "
               f"second token prediction ranges between 85% and 90%' (0.875, band 0.85-0.90); position 2 on: "
               f"vLLM reuses the one MTP module for k > 1; DeepSeek-V4's MTP with num_speculative_tokens=2 in vLLM "
               f"({_V4_PR}, concurrency 1: 76.94% and 38.07% of drafts accepted at positions 0 and 1), "
               f"conditional 0.3807 / 0.7694 = 0.495, repeated beyond"),
    ("mtp", None): Published(
        rates=(0.7694, 0.3807 / 0.7694),
        source=f"DeepSeek-V4's MTP, num_speculative_tokens=2, in vLLM ({_V4_PR}, concurrency 1: 76.94% and "
               f"38.07% of drafts accepted at positions 0 and 1; conditional 0.769 and 0.495, the last repeated)"),
    ("eagle", None): Published(
        rates=(0.622, 0.356 / 0.622, 0.203 / 0.356, 0.119 / 0.203, 0.060 / 0.119),
        source=f"an EAGLE-3 head in vLLM, num_spec_tokens=5, max_num_seqs=8 ({_EAGLE3_PR}, gpt-oss's existing "
               f"speculator: accepted at positions 0-4 by 62.2%, 35.6%, 20.3%, 11.9%, 6.0% of drafts; conditional "
               f"rates their ratios, the last repeated); no per-position figure was found for the model itself"),
    ("ngram", None): Published(
        rates=(0.81, 0.74 / 0.81, 0.70 / 0.74, 0.68 / 0.70, 0.66 / 0.68),
        source=f"vLLM's n-gram proposer, num_spec_tokens=5, prompt_lookup 2-5, on an editing dataset "
               f"(vdaita/edit_5k_char; {_NGRAM_PR}: accepted at positions 0-4 by 81%, 74%, 70%, 68%, 66% of "
               f"drafts; conditional rates their ratios, the last repeated; an edit-heavy workload, where n-gram "
               f"lookup does best)"),
}


@dataclass(frozen=True)
class Speculative:
    """A resolved speculative decoding configuration.

    method: ngram, eagle, mtp or draft (draft_model: the draft model's catalog name). k: draft
    tokens a step. acceptance: conditional acceptance rate per position (k of them). lookahead:
    the KV slots vLLM reserves beyond the scheduled tokens (vllm.py num_lookahead_tokens: k for
    EAGLE, MTP and a draft model, 0 for n-gram). source: where the rates come from."""

    method: str
    k: int
    acceptance: tuple[float, ...]
    source: str
    draft_model: str | None = None
    band: dict = field(default_factory=dict, compare=False)
    #: an EAGLE head or MTP module priced as one layer of the target's shape: 1 / its layers (0: no
    #: target model, or a method without a head)
    head_fraction: float = 0.0

    @property
    def lookahead(self) -> int:
        return 0 if self.method == "ngram" else self.k

    @property
    def draft_slots(self) -> int:
        """The drafter's new slots in the batch per scheduled request (speculative.py
        max_num_new_slots_for_drafting: 1 for an autoregressive draft model, else 0), which vLLM's
        input budget counts beside the scheduled tokens."""
        return 1 if self.method == "draft" else 0

    def expected_tokens(self) -> float:
        return expected_tokens_per_step(self.acceptance)

    def to_dict(self) -> dict:
        out = {"method": self.method, "num_speculative_tokens": self.k, "acceptance": list(self.acceptance),
               "acceptance_kind": "conditional per position (position p accepted given 1..p-1 were)",
               "expected_tokens_per_step": self.expected_tokens(), "lookahead_slots": self.lookahead,
               "draft_slots_per_request": self.draft_slots,
               "source": self.source}
        if self.draft_model is not None:
            out["draft_model"] = self.draft_model
        if self.band:
            out["acceptance_band"] = {end: list(v) for end, v in self.band.items()}
            out["expected_tokens_band"] = {end: expected_tokens_per_step(v) for end, v in self.band.items()}
        return out


def expected_tokens_per_step(acceptance) -> float:
    """1 + sum over positions of the product of the conditional rates up to it."""
    total, run = 1.0, 1.0
    for a in acceptance:
        run *= float(a)
        total += run
    return total


def parse_method(text) -> tuple[str, str | None]:
    """("draft", MODEL) for draft:MODEL, else (method, None); refused when unknown."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"speculative (--speculative) must be one of ngram, eagle, mtp, draft:MODEL, got {text!r}")
    name = text.strip()
    if name.lower().startswith("draft:"):
        model = name.split(":", 1)[1].strip()
        if not model:
            raise ConfigError("speculative (--speculative) draft:MODEL needs the draft model's name, e.g. "
                              "draft:Llama-3.2-1B")
        return "draft", model
    method = name.lower()
    if method not in METHODS or method == "draft":
        raise ConfigError(f"speculative (--speculative): unknown method {name!r} (known: ngram, eagle, mtp, "
                          f"draft:MODEL)")
    return method, None


def parse_acceptance(text) -> tuple[float, ...]:
    """a1,a2,...: conditional rates in [0, 1]."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        raise ConfigError(f"acceptance (--acceptance) wants comma-separated rates in [0, 1], got {text!r}") from None
    bad = [v for v in values if not 0.0 <= v <= 1.0]
    if bad or not values:
        raise ConfigError(f"acceptance (--acceptance): every rate must be in [0, 1], got {text!r}")
    return values


def _published(method: str, model: str | None) -> Published | None:
    if model is not None:
        for (m, family), entry in PUBLISHED.items():
            if m == method and family is not None and str(model).lower().startswith(family.lower()):
                return entry
    return PUBLISHED.get((method, None))


def _extend(rates, k: int) -> tuple[float, ...]:
    rates = tuple(float(r) for r in rates)
    return rates[:k] + (rates[-1],) * max(0, k - len(rates))


def resolve(speculative, k, *, model=None, acceptance=None) -> Speculative | None:
    """The speculative configuration of `speculative` (ngram, eagle, mtp, draft:MODEL; None: off)
    with `k` draft tokens, on target `model`. acceptance: the user's conditional rates (a1,...,
    or a sequence); default: the published figures for the method and model."""
    if speculative is None:
        if k is not None or acceptance is not None:
            raise ConfigError("num_speculative_tokens (--num-speculative-tokens) and acceptance (--acceptance) "
                              "set speculative decoding: add speculative (--speculative ngram|eagle|mtp|draft:MODEL)")
        return None
    method, draft_model = parse_method(speculative)
    if k is None:
        raise ConfigError("speculative decoding needs num_speculative_tokens (--num-speculative-tokens K)")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise ConfigError(f"num_speculative_tokens (--num-speculative-tokens) must be a whole number from 1 to "
                          f"{MAX_K}, got {k!r}")
    if method == "mtp" and model is not None:
        if not _has_mtp(model):
            raise ConfigError(f"speculative mtp: {model} has no multi-token prediction module in its config "
                              "(num_nextn_predict_layers); use eagle, ngram or draft:MODEL")
    if method == "draft" and draft_model is not None:
        _check_draft(draft_model, model)
    band = {}
    if acceptance is not None:
        rates = parse_acceptance(acceptance) if isinstance(acceptance, str) else tuple(acceptance)
        rates = parse_acceptance(",".join(str(r) for r in rates))
        if len(rates) not in (1, k):
            raise ConfigError(f"acceptance (--acceptance) gives {len(rates)} rates for {k} draft tokens: give 1 "
                              f"(every position) or {k}")
        rates = _extend(rates, k)
        source = "given (--acceptance)"
    else:
        entry = _published(method, model)
        if entry is None:
            raise ConfigError(f"no published acceptance rates for speculative {speculative!r}: give them "
                              "(--acceptance a1,a2,...)")
        rates = _extend(entry.rates, k)
        source = entry.source
        if entry.low is not None:
            band = {"low": _extend(entry.low, k), "high": _extend(entry.high, k)}
    head_fraction = 0.0
    if method in ("eagle", "mtp") and model is not None:
        head_fraction = 1.0 / get_model(model).num_layers
    return Speculative(method=method, k=k, acceptance=rates, source=source, draft_model=draft_model, band=band,
                       head_fraction=head_fraction)


def draft_cost_note(spec: Speculative, priced: bool) -> str:
    """How the run priced the drafter (the report states it)."""
    if not priced:
        return "not priced: the time model has no roofline (the draft's passes take no time)"
    if spec.method == "ngram":
        return "not priced: vLLM's n-gram proposer is a lookup on the host CPU, overlapped with nothing and unmeasured here"
    if spec.method == "draft":
        return (f"{spec.k} passes a step of {spec.draft_model} on the same GPUs and tensor parallelism, each a decode "
                "step of the decoding requests priced by the draft model's own roofline")
    return (f"{spec.k} passes a step, each a decode step of the decoding requests priced as one layer of the target "
            f"model's ({spec.head_fraction:.4g} of its decode step: the head's layer, its share of the fixed costs and "
            "LM head)")


def _has_mtp(model) -> bool:
    """Whether `model`'s config.json (the catalog's copy) declares MTP modules."""
    spec = get_model(model)
    path = Path(__file__).resolve().parent.parent / "catalog" / "configs" / (spec.hf_id.replace("/", "--") + ".json")
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    cfg = cfg.get("text_config", cfg) if isinstance(cfg, dict) else {}
    keys = ("num_nextn_predict_layers", "num_mtp_modules", "mtp_num_hidden_layers")
    return any(isinstance(cfg.get(k), int) and cfg.get(k) > 0 for k in keys)


def _check_draft(draft_model: str, model) -> None:
    try:
        get_model(draft_model)
    except ConfigError as e:  # (the catalog's message names the model and the closest names)
        raise ConfigError(f"speculative draft:{draft_model}: {e}") from None
    if model is not None and str(draft_model).lower() == str(model).lower():
        raise ConfigError(f"speculative draft:{draft_model} is the target model itself: give a smaller draft model")


def summary(spec: Speculative, raw) -> dict:
    """The run's speculative section: the model (spec.to_dict()) and what the run measured over
    every verification step (whole run, all instances): drafted and accepted tokens, the mean
    tokens a verification step outputs (1 + accepted / steps), and the fraction of verifications
    that accepted position p (vLLM's "acceptance at token p")."""
    steps = int(raw.counters.get("spec_steps", 0))
    accepted = int(raw.counters.get("spec_accepted", 0))
    at = [] if raw.spec_accepted_at is None else [int(x) for x in raw.spec_accepted_at]
    out = spec.to_dict()
    out["measured"] = {
        "window": "every verification step of the run (all requests, warm-up included)",
        "verification_steps": steps, "drafted_tokens": int(raw.counters.get("spec_drafted", 0)),
        "accepted_tokens": accepted,
        "tokens_per_step": (1.0 + accepted / steps) if steps else None,
        "accepted_at_position": [x / steps for x in at] if steps else None,
    }
    return out


def _tpot(report) -> dict:
    lat = report.latencies()["tpot"]
    band = report.latency_band()
    out = {"p50_s": lat.get("p50"), "mean_s": lat.get("mean")}
    if band:
        out["p50_band_s"] = band["tpot"].get("p50")
        out["mean_band_s"] = band["tpot"].get("mean")
    return out


def compare(report, baseline) -> dict:
    """TPOT with speculation (`report`) and without (`baseline`: the same run without it), each with
    the calibrated roofline's band where there is one, over each run's finished judged requests;
    stored in report.speculative["tpot"] and returned."""
    with_, without = _tpot(report), _tpot(baseline)
    change = None
    if with_["p50_s"] and without["p50_s"]:
        change = with_["p50_s"] / without["p50_s"] - 1.0
    out = {"window": "each run's finished judged requests (summary.window)", "with": with_, "without": without,
           "p50_change": change}
    report.speculative["tpot"] = out
    return out


def pool_with_drafter(spec: Speculative, source: dict, weights_dtype: str, kv_dtype: str) -> tuple[int, dict] | None:
    """The KV pool vLLM sizes with the drafter loaded, from the target's (`source`: config.resolve's
    capacity_source of kind gpu_memory): the drafter's weights come out of the memory the profile
    leaves, and its attention layers' KV joins every token's (one KV cache config over the target's
    and the drafter's layers). A draft model: its catalog weights and KV per token on the same TP;
    an EAGLE head or MTP module: one layer of the target's shape (its weights per layer, its KV per
    layer; the head's own embedding and LM head are not counted). None where it does not apply:
    n-gram (no drafter), a pool not sized from GPU memory, or a block count given.
    Returns (blocks, the budget's document)."""
    if spec.method == "ngram" or source.get("kind") != "gpu_memory" or source.get("num_gpu_blocks_override"):
        return None
    tp, bs = int(source["tp"]), int(source["block_size"])
    per_token, available = float(source["kv_bytes_per_token_per_gpu"]), float(source["kv_bytes_available"])
    if spec.method == "draft":
        draft = get_model(spec.draft_model)
        weights = draft.total_params * _weight_bytes(weights_dtype) / tp
        kv = kv_bytes_per_token_per_gpu(draft, tp, kv_dtype)
        what = f"{draft.name}'s weights and KV on each of the {tp} GPUs"
    else:
        target = get_model(source["model"])
        weights = float(source["weight_bytes_per_gpu"]) / target.num_layers
        kv = per_token / target.num_layers
        what = f"one layer of {target.name}'s weights and KV per GPU"
    if source.get("kv_cache_memory_bytes") is not None:
        weights = 0.0  # (the given KV memory is the cache's alone: the weights are outside it)
    blocks = int((available - weights) // ((per_token + kv) * bs))
    if blocks < 1:
        raise ConfigError(f"speculative {spec.method}: the drafter ({what}) leaves no room for a KV block")
    return blocks, {"drafter": what, "drafter_weight_bytes_per_gpu": weights,
                    "drafter_kv_bytes_per_token_per_gpu": kv, "blocks_without_drafter": int(source["blocks"]),
                    "blocks": blocks}
