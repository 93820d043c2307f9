"""The decoding benchmark of the chapter "The cost of attention"
(book/cost_attention.ipynb): one generated token with and without the KV cache, per
scheme and prompt length, against the bytes a step must read.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .measure import _synchronized, time_it


def decode_model(scheme: str, *, max_len: int, device="cpu"):
    """The book's small TinyLM for ``scheme``
    (:func:`posenc.experiments.experiment_config`) with random weights (speed does not
    depend on them), in eval mode. A learned table gets ``max_len`` rows so that it
    covers the longest prompt."""
    from .runs import experiment_config
    from ..layers.model import TinyLM

    options = {"max_len": max_len} if scheme == "learned" else {}
    model_cfg, _ = experiment_config(scheme, **options)
    torch.manual_seed(0)
    return TinyLM(model_cfg).to(device).eval()


def _decode_step(model, prompt: torch.Tensor, cached: bool) -> Callable:
    """A function that computes the next token's logits after ``prompt`` (1, T): with
    the KV cache (already holding the prompt; the step appends one token and the cache
    is put back afterwards, so every call decodes at the same context length) or by
    running the whole sequence of T + 1 tokens again."""
    device = prompt.device
    length = prompt.shape[1]
    token = prompt[:, -1:]
    if not cached:
        tokens = torch.cat((prompt, token), dim=1)
        positions = torch.arange(length + 1, device=device)
        return lambda: model(tokens, positions)
    cache = model.new_cache()
    with torch.no_grad():
        model(prompt, torch.arange(length, device=device), cache=cache)
    saved = [(layer.k, layer.v, layer.positions) for layer in cache.layers]
    position = torch.tensor([length], device=device)

    def step():
        logits = model(token, position, cache=cache)
        for layer, (k, v, pos) in zip(cache.layers, saved, strict=True):
            layer.k, layer.v, layer.positions = k, v, pos
        return logits

    return step


def decode_benchmark(
    *,
    prompt_lens=(64, 256, 1024),
    schemes=None,
    device="cpu",
    min_run_time: float = 1.0,
    bandwidth: float | None = None,
) -> list[dict]:
    """Tokens per second of decoding for every registered scheme, with and without
    the KV cache, at several context lengths.

    One decoding step after a prompt of T tokens: with the cache, one token's forward
    pass against T cached keys and values (the cache is restored after each timed
    step); without it, the forward pass over all T + 1 tokens that a model without a
    cache needs for every new token. The prompt's own forward pass (the prefill) is
    timed too.

    Returns:
        One dict per (scheme, prompt_len, cached): ``tokens_per_s``, ``ms_per_token``,
        ``prefill_ms``, ``bytes_per_token`` (the weights plus, with the cache, every
        layer's cached keys and values, float32: the least a cached step reads),
        ``GB_per_s`` and ``floor_ms`` (bytes / ``bandwidth``, the copy bandwidth,
        when given).
    """
    from ..schemes import chapter_schemes

    device = torch.device(device)
    schemes = list(chapter_schemes() if schemes is None else schemes)
    rows = []
    for scheme in schemes:
        model = decode_model(scheme, max_len=max(prompt_lens) + 1, device=device)
        cfg = model.config
        weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        for prompt_len in prompt_lens:
            prompt = torch.randint(0, 256, (1, prompt_len), device=device)
            with torch.no_grad():
                prefill = time_it(
                    _synchronized(_decode_step(model, prompt[:, :-1], False), device),
                    min_run_time=min_run_time,
                )["median_s"]
                for cached in (True, False):
                    per_token = time_it(
                        _synchronized(_decode_step(model, prompt, cached), device),
                        min_run_time=min_run_time,
                    )["median_s"]
                    kv = 2 * cfg.num_layers * prompt_len * cfg.d_model * 4
                    nbytes = weight_bytes + (kv if cached else 0)
                    rows.append(
                        {
                            "scheme": scheme,
                            "prompt_len": prompt_len,
                            "cached": cached,
                            "tokens_per_s": 1.0 / per_token,
                            "ms_per_token": per_token * 1e3,
                            "prefill_ms": prefill * 1e3,
                            "bytes_per_token": nbytes,
                            "GB_per_s": nbytes / per_token / 1e9,
                            "floor_ms": None
                            if bandwidth is None
                            else nbytes / bandwidth * 1e3,
                        }
                    )
    return rows


# --- relative biases: the T×T tensor, and the kernels that never build it ----------

#: Schemes of the bias benchmark. "none" is attention without positions (the floor of
#: what any scheme adds); "shaw" is Shaw et al.'s key term alone (its value term
#: changes the output, not the scores, and has no score_mod).
