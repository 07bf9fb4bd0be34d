"""The hybrid KV engines: a hybrid model's layer groups (sliding-window, chunked-local, Mamba
beside full attention) under vLLM 0.33.0's hybrid KV cache coordinator (coordinator.py, compiled:
coordinator.c) and SGLang 0.5.23's UnifiedRadixCache (unified_radix.py, over its tree and its
pools; compiled: unified_radix.c). They are not eviction policies: the vllm and radix policies
replay through them, and the serving kernel drives them through their table (engine.h)."""
