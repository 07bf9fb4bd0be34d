"""A real llama-server, built for CPU from source, on a tiny random-weights model.

A harness (pytest does not collect it) for tests/real_engines/test_llamacpp_server.py:

- ``server_binary()``: $KVREPLAY_LLAMA_SERVER, else a build cached in
  tests/real_engines/.cache/llama.cpp/, else one built there: the llama-cpp-python 0.3.36 sdist
  from PyPI vendors llama.cpp at commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f (MIT), built
  with cmake and ninja from PyPI (``pip install cmake ninja``), CPU only, the server target alone
  (about 11 minutes on 2 cores; the build needs no network past PyPI: the web UI is left out);
- ``tiny_model(path)``: a 2-layer llama GGUF with random weights and a minimal SentencePiece
  vocabulary, written with the ``gguf`` package (no download);
- ``Server``: llama-server on 127.0.0.1, ``complete()`` POSTs token-id prompts to /completion.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

VERSION = "0.3.36"  # llama-cpp-python; vendors llama.cpp 0c1e57098bba43ac29e6e3b677cdceebdd22334f
CACHE = Path(__file__).resolve().parent / ".cache" / "llama.cpp"
CONFIGURE = ["-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DLLAMA_BUILD_TESTS=OFF",
             "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON",
             "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_OPENSSL=OFF"]


def server_binary() -> Path:
    given = os.environ.get("KVREPLAY_LLAMA_SERVER")
    if given:
        return Path(given)
    built = CACHE / "build" / "bin" / "llama-server"
    if built.exists():
        return built
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                    f"llama-cpp-python=={VERSION}", "-d", str(CACHE)], check=True)
    sdist = next(CACHE.glob(f"llama_cpp_python-{VERSION}.tar.gz"))
    with tarfile.open(sdist) as tar:
        tar.extractall(CACHE, filter="data")
    source = CACHE / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    cmake = shutil.which("cmake") or "cmake"
    subprocess.run([cmake, "-S", str(source), "-B", str(CACHE / "build"), *CONFIGURE], check=True)
    subprocess.run([cmake, "--build", str(CACHE / "build"), "--target", "llama-server", "-j", str(os.cpu_count() or 2)],
                   check=True)
    return built


def tiny_model(path: Path, *, vocab: int = 512, embd: int = 64, layers: int = 2, ctx: int = 4096) -> Path:
    """A llama GGUF with random weights (seed 0) and a minimal SentencePiece vocabulary: <unk>,
    <s>, </s>, the 256 byte tokens, then filler pieces; no implicit BOS (prompts are token ids)."""
    import gguf
    import numpy as np

    heads, heads_kv, ff = 4, 2, 128
    head_dim = embd // heads
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("kvreplay-tiny-random-llama")
    for add, value in ((w.add_context_length, ctx), (w.add_embedding_length, embd), (w.add_block_count, layers),
                       (w.add_feed_forward_length, ff), (w.add_head_count, heads), (w.add_head_count_kv, heads_kv),
                       (w.add_rope_dimension_count, head_dim), (w.add_vocab_size, vocab)):
        add(value)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    filler = vocab - len(tokens)
    tokens += [f"\u2581t{i}" for i in range(filler)]
    types += [gguf.TokenType.NORMAL] * filler
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 259 + [-float(i + 1) for i in range(filler)])
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)

    def r(*shape, s=0.02):
        return (rng.standard_normal(shape) * s).astype(np.float32)

    kv = heads_kv * head_dim
    w.add_tensor("token_embd.weight", r(vocab, embd))
    for k in range(layers):
        p = f"blk.{k}."
        w.add_tensor(p + "attn_norm.weight", np.ones(embd, dtype=np.float32))
        for name, shape in (("attn_q", (embd, embd)), ("attn_k", (kv, embd)), ("attn_v", (kv, embd)),
                            ("attn_output", (embd, embd))):
            w.add_tensor(p + name + ".weight", r(*shape))
        w.add_tensor(p + "ffn_norm.weight", np.ones(embd, dtype=np.float32))
        for name, shape in (("ffn_gate", (ff, embd)), ("ffn_up", (ff, embd)), ("ffn_down", (embd, ff))):
            w.add_tensor(p + name + ".weight", r(*shape))
    w.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
    w.add_tensor("output.weight", r(vocab, embd, s=1.0))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


class Server:
    """llama-server on a free local port, for a `with` block."""

    def __init__(self, binary: Path, model: Path, args: list, ctx: int = 4096):
        self.binary, self.model, self.args, self.ctx = binary, model, args, ctx

    def __enter__(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([str(self.binary), "-m", str(self.model), "-c", str(self.ctx), "-t", "1",
                                      "--no-warmup", "--host", "127.0.0.1", "--port", str(self.port), *self.args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError("llama-server did not come up in 60 s")

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def complete(self, prompt: list, n_predict: int = 1) -> dict:
        body = json.dumps({"prompt": prompt, "n_predict": n_predict, "cache_prompt": True, "temperature": 0,
                           "ignore_eos": True, "return_tokens": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())


CONFIGS = {  # name: (llama-server flags, kvreplay llamacpp parameters)
    "parallel-2": (["--parallel", "2"], {"slots": 2}),
    "default-4-unified": ([], {"slots": 0}),
    "no-host-cache": (["--parallel", "2", "--cache-ram", "0"], {"slots": 2, "cache_ram": 0}),
    "lru-only": (["--parallel", "2", "-sps", "0"], {"slots": 2, "similarity": 0.0}),
}


def segment(rng, n: int, first: int) -> list:
    return [first] + [rng.randrange(259, 512) for _ in range(n - 1)]


def workload(rng) -> list:
    """(label, prompt built from the earlier prompts and the server's replies)."""
    sys_a, sys_b, sys_z = segment(rng, 40, 300), segment(rng, 40, 301), segment(rng, 60, 302)
    u = {k: segment(rng, n, 310 + i) for i, (k, n) in enumerate(
        (("a1", 20), ("a2", 12), ("a3", 10), ("b1", 20), ("b2", 12), ("b3", 10), ("div", 30), ("low", 72),
         ("over", 71)))}
    return [
        ("A1", lambda h: sys_a + u["a1"]),
        ("B1", lambda h: sys_b + u["b1"]),
        ("A2", lambda h: h["A1"] + u["a2"]),  # (h[x]: x's prompt and the server's reply)
        ("B2", lambda h: h["B1"] + u["b2"]),
        ("Adiv", lambda h: sys_a[:30] + u["div"]),  # diverges inside A's system prompt: 30 of 60
        ("Z", lambda h: sys_z),  # shares nothing
        ("B3", lambda h: h["B2"] + u["b3"]),  # B's slot was taken: back from the host cache
        ("A3", lambda h: h["A2"] + u["a3"]),
        ("A3rep", lambda h: h["A3"][:-1]),  # A3's prompt again: at most n - 1 tokens reused
        ("sim10", lambda h: h["A3"][:8] + u["low"]),  # shares 8 of 80: not above 0.1
        ("sim11", lambda h: h["A3"][:9] + u["over"]),  # 9 of 80: above it
        ("B4", lambda h: h["B3"] + u["b1"][:8]),
    ]
