"""vLLM 0.33.0's online beam-search loop (entrypoints/generate/beam_search/online.py) run on CPU,
with the engine behind it replaced by seeded logprobs.

Loaded from the wheel as they are (the same extracted tree as vllm_scheduler.py): online.py and
its utils.py, sampling_params.py (SamplingParams, BeamSearchParams), logprobs.py (Logprob),
inputs/ (tokens_input, the beams' prompts), utils/ (random_uuid) and utils/async_utils.py
(collect_from_async_generator). Every other vllm.* module is an inert stub (engine_stubs.py), and
so are the third-party packages vllm_scheduler.py stubs (torch, ...).

What is stubbed, and why the path never needs more:
- ``engine_client.generate(prompt, sampling_params, request_id, ...)``: the engine. It records the
  request (its id, prompt tokens, max_tokens, logprobs) and yields one output whose only token's
  logprobs are kvreplay's synthetic candidates for that prompt (serving/beam.py
  synthetic_logprobs; the state is found from the prompt's tokens), finish reason "length".
- ``engine_client.input_processor``: resolve_watermarking (a no-op: watermarking is off),
  vllm_config (read by configure_logprobs only with allowed_token_ids, which are not given) and
  generation_config_fields ({}: the EOS ids are the tokenizer's, token 0).
- ``renderer.get_tokenizer()``: eos_token_id 0 and a decode that returns "" (the text is built
  after the search, from the tokens).
- ``RequestOutput`` / ``CompletionOutput`` (vllm/outputs.py imports torch): plain records of the
  fields online.py gives them (only the final answer is built with them).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_scheduler  # noqa: E402
from engine_stubs import StubModule, engine_modules  # noqa: E402

REAL = {
    "vllm.envs", "vllm.logger", "vllm.exceptions", "vllm.utils", "vllm.utils.async_utils", "vllm.sampling_params",
    "vllm.logprobs", "vllm.inputs", "vllm.inputs.engine", "vllm.inputs.llm", "vllm.v1.serial_utils",
    "vllm.entrypoints.generate.beam_search.online", "vllm.entrypoints.generate.beam_search.utils",
}
PACKAGES = {"vllm.utils", "vllm.inputs"}


class _Stub(StubModule):
    real = frozenset(REAL)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root):
        self.root = root

    def find_spec(self, name, path=None, target=None):
        if self.root is None:
            if name.split(".")[0] not in vllm_scheduler.THIRD_PARTY_STUBS:
                return None
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        if name != "vllm" and not name.startswith("vllm."):
            return None
        if name in REAL:
            rel = name.replace(".", "/")
            if name in PACKAGES:
                return importlib.util.spec_from_file_location(name, self.root / rel / "__init__.py",
                                                              submodule_search_locations=[])
            return importlib.util.spec_from_file_location(name, self.root / (rel + ".py"))
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return _Stub(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def _owned(name, module) -> bool:
    return name == "vllm" or name.startswith("vllm.") or isinstance(module, StubModule)


class RealBeamSearch:
    """online.py's BeamSearchOnlineMixin, with what it calls (module doc)."""

    def __init__(self, download: bool = False):
        vllm_scheduler.check_python_packages()
        self.root = vllm_scheduler.extracted_root(download)
        self.saved: dict = {}
        with self.active():
            self.online = importlib.import_module("vllm.entrypoints.generate.beam_search.online")
            self.sampling = importlib.import_module("vllm.sampling_params")
            self.logprobs = importlib.import_module("vllm.logprobs")

    def active(self):
        """vllm.* resolves to this copy meanwhile."""
        return engine_modules(self, _owned, _Finder(self.root), _Finder(None))

    def run(self, prompt_tokens: list, width: int, max_tokens: int, logprobs_of) -> tuple[list, list]:
        """vLLM's loop on one prompt: (every request it sent, in order: (request_id, prompt tokens,
        max_tokens, logprobs asked); its final outputs: (token_ids, cumulative_logprob, finish_reason)).
        `logprobs_of(prompt tokens)` gives the engine's (token, logprob) candidates."""
        sent = []
        real = self

        class Engine:
            input_processor = types.SimpleNamespace(resolve_watermarking=lambda params: None,
                                                    vllm_config=types.SimpleNamespace(speculative_config=None),
                                                    generation_config_fields={})

            async def generate(self, prompt, sampling_params, request_id, **kwargs):
                tokens = list(prompt["prompt_token_ids"])
                sent.append((request_id, tokens, sampling_params.max_tokens, sampling_params.logprobs))
                top = {t: real.logprobs.Logprob(logprob=lp, rank=k + 1) for k, (t, lp) in enumerate(logprobs_of(tokens))}
                yield types.SimpleNamespace(outputs=[types.SimpleNamespace(finish_reason="length", logprobs=[top])])

        tokenizer = types.SimpleNamespace(eos_token_id=0, decode=lambda tokens, skip_special_tokens=True: "")

        class Server(self.online.BeamSearchOnlineMixin):
            renderer = types.SimpleNamespace(get_tokenizer=lambda: tokenizer)
            engine_client = Engine()

        async def collect():
            params = self.sampling.BeamSearchParams(beam_width=width, max_tokens=max_tokens)
            return [o async for o in Server().beam_search({"type": "token", "prompt_token_ids": prompt_tokens},
                                                          "req", params)]

        record = lambda **fields: types.SimpleNamespace(**fields)  # noqa: E731
        with self.active():
            saved = self.online.RequestOutput, self.online.CompletionOutput
            self.online.RequestOutput = self.online.CompletionOutput = record
            try:
                outputs = asyncio.run(collect())
            finally:
                self.online.RequestOutput, self.online.CompletionOutput = saved
        final = outputs[-1]
        return sent, [(list(c.token_ids), c.cumulative_logprob, c.finish_reason) for c in final.outputs]


_REAL: dict = {}


def real_beam_search(download: bool = False) -> RealBeamSearch:
    if "v" not in _REAL:
        _REAL["v"] = RealBeamSearch(download=download)
    return _REAL["v"]
