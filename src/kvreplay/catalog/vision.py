"""A multimodal model's vision tower, from its config.json ``vision_config``: the shapes vLLM 0.33.0
loads beside the text model and runs in its profile run (serving/timing/memory.py).

Two towers are read, the two the catalog's multimodal models have:

- ``llama4_vision_model`` (Llama 4 Scout / Maverick; vllm/model_executor/models/mllama4.py): a
  ViT over 336 x 336 tiles of 14 x 14 patches plus a CLS token, a pixel-shuffle adapter (ratio
  0.5: a tile's 576 patches become 144 tokens) with a two-layer MLP (4 x hidden -> projector_input_dim
  -> projector_output_dim) and a projector to the text width. vLLM's dummy image is the largest
  the processor makes: ``max_patches`` (16) tiles plus the global tile, 17 tiles of 577 encoder
  tokens, 17 x 144 = 2,448 text tokens (``Mllama4ProcessingInfo.get_image_size_with_most_features``,
  ``get_patch_per_chunk``; ``_postprocess_hf_mm_data``: 1 + tiles when there is more than one).
- ``siglip_vision_model`` (Gemma 3; vllm/model_executor/models/gemma3_mm.py): a SigLIP ViT over one
  896 x 896 image of 14 x 14 patches (4,096 encoder tokens, no CLS), average-pooled to
  ``mm_tokens_per_image`` (256) tokens and projected to the text width (pan-and-scan off, vLLM's
  default: one crop).

``vision_field`` returns the dict ModelSpec.vision holds: the shapes, the parameters (each linear
layer's weight and bias, the norms, the patch and position embeddings, adapter and projector),
the encoder tokens one image costs and the text tokens it yields.
"""

from __future__ import annotations

from .config_view import ConfigView

KINDS = ("llama4_vision_model", "siglip_vision_model")


def vision_field(vision: ConfigView, top: ConfigView, text_hidden: int) -> dict:
    """ModelSpec.vision from a ``vision_config`` section (``top``: the whole file, for the Gemma 3
    keys it keeps outside vision_config; ``text_hidden``: the text model's width)."""
    kind = vision.string("model_type")
    if kind not in KINDS:
        raise vision.error("model_type", f"{kind!r} is a vision tower kvreplay cannot size (it reads "
                           f"{', '.join(KINDS)}); give the text model's config.json")
    hidden = vision.int("hidden_size", hi=1 << 16)
    inter = vision.int("intermediate_size", hi=1 << 18)
    layers = vision.int("num_hidden_layers", hi=1024)
    heads = vision.int("num_attention_heads", hi=1024)
    image, patch = vision.int("image_size", hi=1 << 14), vision.int("patch_size", hi=1 << 10)
    channels = vision.int("num_channels", 3, hi=16)
    grid = (image // patch) ** 2
    per_layer = 4 * hidden * hidden + 4 * hidden + 2 * hidden * inter + inter + hidden + 4 * hidden
    if kind == "llama4_vision_model":
        ratio = vision.number("pixel_shuffle_ratio", 0.5, lo=0.01, hi=1.0)
        shuffled = 4 * hidden if ratio == 0.5 else int(round(hidden / ratio ** 2))
        proj_in = vision.int("projector_input_dim", hi=1 << 16)
        proj_out = vision.int("projector_output_dim", hi=1 << 16)
        out_dim = vision.int("vision_output_dim", proj_out, hi=1 << 16)
        tiles = 16  # Llama4ImageProcessor max_patches: the published Scout / Maverick processors
        chunks = tiles + 1
        encoder_tokens = chunks * (grid + 1)
        tokens = chunks * int(round(grid * ratio ** 2))
        extra = (channels * patch * patch * hidden + hidden + (grid + 1) * hidden + 4 * hidden
                 + shuffled * proj_in + proj_in * proj_out + out_dim * text_hidden)
    else:
        tokens = top.int("mm_tokens_per_image", 256, hi=1 << 16)
        encoder_tokens = grid
        extra = (channels * patch * patch * hidden + hidden + grid * hidden + 2 * hidden + hidden
                 + hidden * text_hidden)
    return {"kind": kind, "layers": layers, "hidden": hidden, "intermediate": inter, "heads": heads,
            "image_size": image, "patch_size": patch, "encoder_tokens_per_item": int(encoder_tokens),
            "tokens_per_item": int(tokens), "params": int(layers * per_layer + extra)}
