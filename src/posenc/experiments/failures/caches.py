"""Failures 6 and 10 of the chapter of failures: KV caches whose keys carry the wrong
rotation.

* :func:`frequency_switch_failure` — dynamic NTK (``rope_type: "dynamic"``) and
  LongRoPE change the frequencies θ_i when the sequence grows past
  ``original_max_position_embeddings`` L; a cache of keys rotated when they arrived
  keeps the old angles (the wrong way: :func:`stale_cache_logits`, what transformers'
  rotary embedding does during cached generation). The reference recomputes the whole
  sequence at every step (:func:`recomputed_logits`); the fix fixes the frequencies
  for the whole generation with :func:`posenc.layers.pretrained.swap_rope`
  (:func:`fixed_frequency_logits`), so that cached and recomputed logits agree.
* :func:`double_rotation_failure` — a StreamingLLM cache that stores keys after RoPE
  and rotates them again at their cache slots
  (:class:`PostRopeStreamingLayerKVCache`, the wrong way) against the package's
  :class:`~posenc.layers.kv_cache.StreamingLayerKVCache`, which stores them before.

Models are Llama-style transformers causal LMs (SmolLM2 in the chapter, tiny random
ones in the tests). Shapes: T tokens, V vocabulary; ids (T,) int64.
"""

from __future__ import annotations

import torch

from ...layers.kv_cache import StreamingKVCache, StreamingLayerKVCache
from ...layers.losses import nll
from ...layers.pretrained import (
    rope_config,
    streaming_token_losses,
    swap_rope,
    token_losses,
)
from ...rope import apply_rope
from ...scaling import rope_inv_freq
from ...utils import cpu_float64


def _frequencies(model, scaling: dict, seq_len: int):
    """(inv_freq, attention_factor) of ``scaling`` for a sequence of ``seq_len``."""
    config = rope_config(model)
    return rope_inv_freq(config["rotary_dim"], config["base"], scaling, seq_len=seq_len)


def _check(ids: object, prompt_len: object, scaling: object) -> int:
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.is_floating_point():
        raise ValueError(f"ids must be 1-D integer token ids, got {ids!r:.60}")
    if not isinstance(scaling, dict) or (
        "original_max_position_embeddings" not in scaling
    ):
        raise ValueError(
            "scaling must be a rope_parameters dict with original_max_position_"
            f"embeddings (L), got {scaling!r}"
        )
    L = scaling["original_max_position_embeddings"]
    if not isinstance(prompt_len, int) or not 1 <= prompt_len <= L < ids.numel():
        raise ValueError(
            f"need 1 <= prompt_len <= L < T: the prompt inside the context and the "
            f"generation past it; got prompt_len={prompt_len}, L={L}, T={ids.numel()}"
        )
    return L


def _cached_logits(model, ids, prompt_len: int, frequencies) -> torch.Tensor:
    """The prompt in one call, then one token per step through transformers'
    DynamicCache (keys stored rotated); ``frequencies(seq_len)`` gives each call's
    (inv_freq, attention_factor). Returns (T, V) float32 logits on the CPU."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    cache, out, start = DynamicCache(config=model.config), [], 0
    for stop in (prompt_len, *range(prompt_len + 1, ids.numel() + 1)):
        inv_freq, factor = frequencies(stop)
        with swap_rope(model, inv_freq=inv_freq, attention_factor=factor):
            logits = model(
                input_ids=ids[None, start:stop].to(device),
                past_key_values=cache,
                use_cache=True,
            ).logits[0]
        out.append(logits.float().cpu())
        start = stop
    return torch.cat(out)


@torch.no_grad()
def stale_cache_logits(model, ids, *, prompt_len: int, scaling: dict) -> torch.Tensor:
    """The wrong way: every call rotates its new keys with the frequencies of the
    current length (``rope_inv_freq(..., seq_len=t)``) and caches them rotated, so the
    keys cached before the switch keep the old angles. This is what transformers'
    ``dynamic_rope_update`` does inside cached generation (5.23,
    ``modeling_rope_utils``; tests/test_failures_caches.py holds the two equal).

    Args:
        model: a Llama-style causal LM. ids: int64 (T,). prompt_len: tokens of the
            first call, ≤ L. scaling: a ``"dynamic"`` or ``"longrope"``
            ``rope_parameters`` dict with ``original_max_position_embeddings`` L < T.

    Returns:
        float32 (T, V): row t is the logits after token t.
    """
    _check(ids, prompt_len, scaling)
    return _cached_logits(
        model, ids, prompt_len, lambda t: _frequencies(model, scaling, t)
    )


@torch.no_grad()
def recomputed_logits(
    model, ids, *, prompt_len: int, scaling: dict, every: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: at step t the whole sequence ``ids[: t + 1]`` is run again
    with the frequencies of length t + 1 (no cache), as the scaling rule means.

    Args:
        as :func:`stale_cache_logits`; every: recompute every ``every``-th step only
        (each recomputation is a forward pass over the whole prefix).

    Returns:
        ``(rows, logits)``: int64 (N,) the rows t recomputed (t ≥ prompt_len − 1) and
        float32 (N, V) their logits.
    """
    _check(ids, prompt_len, scaling)
    device = next(model.parameters()).device
    rows = torch.arange(prompt_len - 1, ids.numel(), every)
    out = []
    for t in rows.tolist():
        inv_freq, factor = _frequencies(model, scaling, t + 1)
        with swap_rope(model, inv_freq=inv_freq, attention_factor=factor):
            out.append(model(input_ids=ids[None, : t + 1].to(device)).logits[0, -1])
    return rows, torch.stack(out).float().cpu()


@torch.no_grad()
def fixed_frequency_logits(
    model, ids, *, prompt_len: int, scaling: dict
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fix: choose the frequencies once, for the length the generation will
    reach (T), and rotate every call with them
    (:func:`posenc.layers.pretrained.swap_rope`); cached keys then carry the angles
    every later step uses.

    Returns:
        ``(cached, one_pass)``: float32 (T, V) logits of cached generation and of
        one forward pass over the whole sequence with the same frequencies; equal up
        to rounding.
    """
    _check(ids, prompt_len, scaling)
    fixed = _frequencies(model, scaling, ids.numel())
    cached = _cached_logits(model, ids, prompt_len, lambda t: fixed)
    with swap_rope(model, inv_freq=fixed[0], attention_factor=fixed[1]):
        device = next(model.parameters()).device
        one_pass = model(input_ids=ids[None].to(device)).logits[0].float().cpu()
    return cached, one_pass


def frequency_switch_failure(
    model, ids, *, prompt_len: int, scaling: dict, every: int = 1
):
    """Failure 6: frequencies that change mid-generation under a KV cache.

    Args:
        as :func:`recomputed_logits`.

    Returns:
        A DataFrame, one row per way (the failure, the reference, the fix): the
        logits it is compared with, ``max_dlogit_inside`` and ``max_dlogit_past``
        the largest |Δ logit| at the compared rows t < L and t ≥ L (past the
        switch), and ``loss_past`` the mean next-token loss (nats) over the
        compared rows t ≥ L.

    Raises:
        ValueError: see :func:`stale_cache_logits`.
    """
    import pandas as pd

    L = _check(ids, prompt_len, scaling)
    rows, reference = recomputed_logits(
        model, ids, prompt_len=prompt_len, scaling=scaling, every=every
    )
    stale = stale_cache_logits(model, ids, prompt_len=prompt_len, scaling=scaling)[rows]
    cached, one_pass = fixed_frequency_logits(
        model, ids, prompt_len=prompt_len, scaling=scaling
    )
    past = rows >= L
    scored = rows[past][rows[past] + 1 < ids.numel()]

    def entry(way, compared_with, logits, against, all_rows):
        delta = (logits - against).abs().amax(-1)  # (N,)
        keep = torch.isin(all_rows, scored)
        loss = nll(logits[keep], ids[all_rows[keep] + 1], torch.float64)
        inside = delta[all_rows < L]
        return {"way": way, "compared with": compared_with,
                "max_dlogit_inside": float(inside.amax()) if inside.numel() else 0.0,
                "max_dlogit_past": float(delta[all_rows >= L].max()),
                "loss_past": float(loss.mean())}

    everything = torch.arange(ids.numel())
    return pd.DataFrame([
        entry("stale cache (the failure)", "recomputed", stale, reference, rows),
        entry("recomputed every step (reference)", "itself", reference, reference,
              rows),
        entry("frequencies fixed for the generation (fix)",
              "one pass, same frequencies", cached, one_pass, everything),
    ]).set_index("way")


class PostRopeStreamingLayerKVCache(StreamingLayerKVCache):
    """The wrong way: a StreamingLLM cache that stores each key *after* RoPE (rotated
    at the slot it arrived in), while the attention, as for
    :class:`~posenc.layers.kv_cache.StreamingLayerKVCache`, rotates every kept key
    again at its current slot. A key arriving at slot n is rotated by 2·n·θ_i before
    eviction and by (n + n′)·θ_i after it moves to slot n′.

    Args:
        sink_tokens, window: as :class:`StreamingLayerKVCache`.
        inv_freq: (rotary_dim/2,) the model's frequencies. layout: its pair layout.
    """

    def __init__(self, sink_tokens: int, window: int, *, inv_freq: torch.Tensor,
                 layout: str = "half") -> None:
        super().__init__(sink_tokens, window)
        self.inv_freq, self.layout = inv_freq, layout

    def append(self, k, v, positions):
        # rotated once here, at the slots it arrives in, then stored
        inv_freq = self.inv_freq.to(k.device)
        k = apply_rope(k, positions, inv_freq=inv_freq, layout=self.layout)
        return super().append(k, v, positions)


def post_rope_streaming_cache(
    model, *, sink_tokens: int, window: int
) -> StreamingKVCache:
    """A :class:`StreamingKVCache` for ``model`` whose layers are the wrong
    :class:`PostRopeStreamingLayerKVCache` (the model's own frequencies)."""
    config = rope_config(model)
    cache = StreamingKVCache(
        config["num_layers"], sink_tokens=sink_tokens, window=window
    )
    inv_freq, _ = rope_inv_freq(config["rotary_dim"], config["base"])
    cache.layers = [
        PostRopeStreamingLayerKVCache(sink_tokens, window, inv_freq=inv_freq)
        for _ in cache.layers
    ]
    return cache


def double_rotation_failure(model, ids, *, sink_tokens: int, window: int):
    """Failure 10: a streaming cache that rotates keys already rotated.

    Reads ``ids`` through a StreamingLLM cache of ``sink_tokens + window`` keys two
    ways, with :func:`posenc.layers.pretrained.streaming_token_losses`: the package's
    cache (keys stored before RoPE, rotated at their slots) and
    :func:`post_rope_streaming_cache` (stored after RoPE and rotated again); and in one
    dense pass (:func:`posenc.layers.pretrained.token_losses`) for scale.

    Args:
        model: a Llama-style causal LM. ids: int64 (T,), T > sink_tokens + window.
        sink_tokens: S ≥ 0. window: W ≥ 1.

    Returns:
        A DataFrame, one row per way: the mean next-token loss (nats) while the cache
        fills (``loss_filling``, the first S + W predictions), after it starts
        evicting (``loss_streaming``) and overall (``loss``).

    Raises:
        ValueError: T ≤ S + W; what :func:`streaming_token_losses` raises.
    """
    import pandas as pd

    capacity = sink_tokens + window
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.numel() <= capacity:
        raise ValueError(f"ids must be (T,) with T > sink_tokens + window = {capacity}")
    ways = {
        "dense, one pass (no cache)": token_losses(model, ids),
        "keys cached before RoPE (StreamingLayerKVCache)": streaming_token_losses(
            model, ids, sink_tokens=sink_tokens, window=window),
        "keys cached after RoPE, rotated again (the failure)": streaming_token_losses(
            model, ids, sink_tokens=sink_tokens, window=window,
            cache=post_rope_streaming_cache(
                model, sink_tokens=sink_tokens, window=window)),
    }
    return pd.DataFrame([
        {"way": way, "loss_filling": float(cpu_float64(x[:capacity]).mean()),
         "loss_streaming": float(cpu_float64(x[capacity:]).mean()),
         "loss": float(cpu_float64(x).mean())}
        for way, x in ways.items()
    ]).set_index("way")
