"""Small transformers decoders with random weights (no download), for the tests of
posenc.tools and swap_rope: 2 layers, 4 query heads over 2 key heads, and q_norm/k_norm
weights drawn away from one so that where a norm acts matters."""

from __future__ import annotations

import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")


def tiny(kind: str = "llama", attn: str = "eager", **overrides):
    """A transformers decoder of 2 layers with random weights."""
    classes = {
        "llama": ("LlamaConfig", "LlamaForCausalLM"),
        "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
        "olmo2": ("Olmo2Config", "Olmo2ForCausalLM"),
        "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
        "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
        "cohere": ("CohereConfig", "CohereForCausalLM"),
        "llama4": ("Llama4TextConfig", "Llama4ForCausalLM"),
        "mistral": ("MistralConfig", "MistralForCausalLM"),
        "gpt_oss": ("GptOssConfig", "GptOssForCausalLM"),
    }
    config_name, model_name = classes[kind]
    settings = dict(
        vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    settings.update(overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = getattr(transformers, config_name)(**settings)
    config._attn_implementation = attn
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():  # norms with weights other than one: where they act matters
        for name, p in model.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                p.copy_(torch.empty_like(p).uniform_(0.5, 1.5))
    return model
