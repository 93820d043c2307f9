"""posenc's RoPE inside a Llama-style transformers model.

:func:`swap_rope` replaces the forward of every attention layer by one that projects
q, k and v with the model's weights and rotates them with :func:`posenc.rope.apply_rope`
(other frequencies, another layout, no rotation, a StreamingLLM cache);
:func:`rope_config` reads a model's positional configuration in the book's notation;
:func:`permute_qk_rows` converts the q/k rows between the layouts.

Shapes: B batch, H query heads, H_kv key/value heads, T positions, d_h ``head_dim``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from ..._checks import check_choice
from ..kv_cache import StreamingKVCache
from ..masks import causal_mask
from ...rope import ROPE_LAYOUTS, apply_rope
from ...frequencies import compute_inv_freq
from ...schemes import PositionalScheme


def _attention_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The self-attention modules of a Llama-style model, in layer order."""
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    if layers is None or not all(
        hasattr(layer, "self_attn")
        and all(hasattr(layer.self_attn, p) for p in ("q_proj", "k_proj", "head_dim"))
        for layer in layers
    ):
        raise TypeError(
            "expected a Llama-style transformers model (model.model.layers[i].self_attn"
            f" with q_proj, k_proj and head_dim), got {type(model).__name__}"
        )
    return [layer.self_attn for layer in layers]


#: Each model's positional configuration as :func:`rope_config` reads it from the
#: loaded model (tests/test_pretrained.py holds the two equal), for pages that describe
#: a model without loading it.
ROPE_CONFIGS = {
    "smollm2": {
        "base": 100000.0,
        "head_dim": 64,
        "rotary_dim": 64,
        "num_heads": 9,
        "num_key_value_heads": 3,
        "num_layers": 30,
        "max_position_embeddings": 8192,
        "layout": "half",
        "rope_type": "default",
    },
}


def rope_config(model: torch.nn.Module) -> dict:
    """A Llama-style model's positional configuration in the book's notation.

    Returns:
        A dict: ``base`` (b), ``head_dim`` (d_h), ``rotary_dim``, ``num_heads`` (H),
        ``num_key_value_heads``, ``num_layers``, ``max_position_embeddings`` (the
        trained length L), ``layout`` (``"half"``: transformers' Llama rotates pairs
        (i, i + d_h/2)) and ``rope_type`` (``"default"`` when unscaled).
    """
    config = model.config
    params = dict(getattr(config, "rope_parameters", None) or {})
    head_dim = getattr(config, "head_dim", None) or (
        config.hidden_size // config.num_attention_heads
    )
    return {
        "base": float(params.get("rope_theta", getattr(config, "rope_theta", 1e4))),
        "head_dim": head_dim,
        "rotary_dim": int(head_dim * params.get("partial_rotary_factor", 1.0)),
        "num_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "num_layers": config.num_hidden_layers,
        "max_position_embeddings": config.max_position_embeddings,
        "layout": "half",
        "rope_type": params.get("rope_type", "default"),
    }


def _posenc_attention(
    attn: torch.nn.Module,
    hidden_states: torch.Tensor,
    position_embeddings=None,
    attention_mask: torch.Tensor | None = None,
    past_key_values=None,
    *,
    position_ids: torch.Tensor,
    rope: dict,
    **kwargs,
):
    """transformers' Llama attention with posenc's rotation in place of its own."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama.modeling_llama import eager_attention_forward

    shape = (*hidden_states.shape[:-1], -1, attn.head_dim)  # (B, T, heads, d_h)
    q = attn.q_proj(hidden_states).view(shape).transpose(1, 2)
    k = attn.k_proj(hidden_states).view(shape).transpose(1, 2)
    v = attn.v_proj(hidden_states).view(shape).transpose(1, 2)  # (B, heads, T, d_h)
    if rope["record"] is not None:
        rope["record"](attn.layer_idx, q, k)
    rotation = {
        "inv_freq": rope["inv_freq"],
        "layout": rope["layout"],
        "attention_factor": rope["attention_factor"],
    }
    if rope["streaming"] is not None:
        return _streaming_attention(attn, q, k, v, position_ids, rope, rotation)
    if rope["attention"] is not None:
        return _method_attention(attn, q, k, v, position_ids, past_key_values, rope)
    if rope["inv_freq"] is not None:
        positions = position_ids[:, None, :]  # (B, 1, T): broadcasts over heads
        q = apply_rope(q, positions, **rotation)
        k = apply_rope(k, positions, **rotation)
    if past_key_values is not None:
        k, v = past_key_values.update(k, v, attn.layer_idx)
    interface = ALL_ATTENTION_FUNCTIONS.get_interface(
        attn.config._attn_implementation, eager_attention_forward
    )
    kwargs.pop("use_cache", None)
    out, weights = interface(
        attn, q, k, v, attention_mask, dropout=0.0, scaling=attn.scaling, **kwargs
    )
    # out (B, T, H, d_h) as transformers' interfaces return it → (B, T, H·d_h)
    return attn.o_proj(out.reshape(*shape[:-2], -1).contiguous()), weights


def _streaming_attention(attn, q, k, v, position_ids, rope, rotation):
    """StreamingLLM inside a Llama attention: the unrotated k and v go into the
    layer's :class:`~posenc.layers.kv_cache.StreamingLayerKVCache`, then q and every
    kept key are rotated at their cache slots (Xiao et al. 2024, §3.2)."""
    layer = rope["streaming"].layers[attn.layer_idx]
    # the cache takes the attention's shape, (1, 1, T) slots shared by the batch
    k, v, k_slots = layer.append(k, v, position_ids[:1, None])
    if rope["inv_freq"] is not None:
        q = apply_rope(q, position_ids[0], **rotation)
        k = apply_rope(k, k_slots, **rotation)
    mask = None
    if q.shape[-2] > 1:  # the queries are the last T_q of the keys
        mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=attn.scaling, enable_gqa=True
    )
    out = out.transpose(1, 2).reshape(*out.shape[:1], out.shape[2], -1)  # (B, T, H·d_h)
    return attn.o_proj(out), None


def _method_attention(attn, q, k, v, position_ids, past_key_values, rope):
    """An attention-level method (the registry's ``"attention"`` namespace) inside a
    Llama attention: un-rotated k and v go into transformers' cache, and the method
    attends from the un-rotated q and every cached key, rotating them itself. The keys'
    positions are consecutive, ending at the last query's."""
    if past_key_values is not None:
        k, v = past_key_values.update(k, v, attn.layer_idx)
    groups = q.shape[1] // k.shape[1]  # grouped-query attention: H / H_kv
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    shared = position_ids[:1]  # (1, T_q): the method needs positions the batch shares
    if not torch.equal(position_ids, shared.expand_as(position_ids)):
        name = rope["attention"].name
        raise ValueError(f"{name} needs the same positions in every row of the batch")
    last = int(shared[0, -1])
    key_positions = torch.arange(last - k.shape[-2] + 1, last + 1, device=q.device)
    out, _ = rope["attention"].attend(
        q, k, v, shared[:, None], key_positions[None, None], scale=attn.scaling
    )
    out = out.transpose(1, 2).reshape(*out.shape[:1], out.shape[2], -1)  # (B, T, H·d_h)
    return attn.o_proj(out), None


def _check_extras(attention, streaming, num_layers: int) -> None:
    """swap_rope's ``attention`` and ``streaming``: at most one, each of its kind."""
    if attention is not None and "attend" not in getattr(attention, "hooks", ()):
        raise TypeError(
            "attention must be a scheme of the registry's 'attention' namespace (one "
            f"that declares 'attend'), got {attention!r}"
        )
    if attention is not None and streaming is not None:
        raise ValueError("attention and streaming cannot be combined")
    if streaming is not None and len(streaming.layers) != num_layers:
        raise ValueError(
            f"the streaming cache has {len(streaming.layers)} layers, the model "
            f"{num_layers}"
        )


@contextlib.contextmanager
def swap_rope(
    model: torch.nn.Module,
    *,
    inv_freq: torch.Tensor | None = None,
    attention_factor: float = 1.0,
    layout: str = "half",
    rotate: bool = True,
    record: Callable[[int, torch.Tensor, torch.Tensor], None] | None = None,
    streaming: StreamingKVCache | None = None,
    attention: PositionalScheme | None = None,
) -> Iterator[torch.nn.Module]:
    """Run a Llama-style transformers model with posenc's RoPE instead of its own.

    Inside the ``with`` block every attention layer projects q, k and v with the
    model's weights, rotates q and k with :func:`posenc.rope.apply_rope` at the
    model's ``position_ids`` and attends with the model's attention implementation;
    transformers' rotary tables are ignored. On exit the model is as it was.

    Args:
        model: a Llama-style model (``LlamaForCausalLM``, ``LlamaModel``, ...).
        inv_freq: (rotary_dim/2,) frequencies θ_i in radians per position, e.g. from
            :func:`posenc.scaling.rope_inv_freq`; default ``base^(−2i/head_dim)`` with
            the model's base.
        attention_factor: multiplies cos and sin (YaRN's temperature).
        layout: ``"half"`` (the layout transformers' Llama weights expect) or
            ``"interleaved"``.
        rotate: False rotates nothing (no positional information at all: the model
            sees only the causal mask).
        record: called as ``record(layer_index, q, k)`` with the unrotated q (B, H, T,
            d_h) and k (B, H_kv, T, d_h) of every layer, e.g. to collect their norms.
        streaming: a :class:`~posenc.layers.kv_cache.StreamingKVCache` with one layer
            per attention layer: keys are kept there unrotated and rotated at their
            cache slots (StreamingLLM); the model is then called with ``position_ids``
            the cache's ``next_positions`` and ``use_cache=False``, one sequence (see
            :func:`streaming_token_losses`).
        attention: a scheme of the registry's ``"attention"`` namespace
            (:mod:`posenc.layers.remapped_schemes`) built with the model's RoPE
            settings: it replaces rotation and attention (then ``inv_freq``,
            ``attention_factor`` and ``layout`` are unused); the cache then holds
            un-rotated keys; positions must be the same in every row.

    Yields:
        The model.

    Raises:
        TypeError: a model without Llama-style attention layers; ``rotate`` not a
            bool.
        ValueError: an unknown layout; inv_freq not 1-D or longer than head_dim/2.
    """
    layers = _attention_layers(model)
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    if not isinstance(rotate, bool):
        raise TypeError(f"rotate must be a bool, got {rotate!r}")
    head_dim = layers[0].head_dim
    if inv_freq is None:
        inv_freq = compute_inv_freq(head_dim, rope_config(model)["base"])
    if inv_freq.dim() != 1 or not 0 < 2 * inv_freq.numel() <= head_dim:
        raise ValueError(
            f"inv_freq must have shape (rotary_dim/2,) with rotary_dim <= head_dim = "
            f"{head_dim}, got {tuple(inv_freq.shape)}"
        )
    _check_extras(attention, streaming, len(layers))
    device = next(model.parameters()).device
    rope = {
        "inv_freq": inv_freq.to(device) if rotate else None,
        "layout": layout,
        "attention_factor": float(attention_factor),
        "record": record,
        "streaming": streaming,
        "attention": None if attention is None else attention.to(device),
    }
    for attn in layers:
        forward = _posenc_attention.__get__(attn)
        attn.forward = lambda *a, _f=forward, **kw: _f(*a, rope=rope, **kw)
    try:
        yield model
    finally:
        for attn in layers:
            del attn.forward


def permute_qk_rows(model: torch.nn.Module, order: torch.Tensor) -> None:
    """Permute, in place, the output rows of every query and key projection within
    each head: row j of a head becomes row ``order[j]``. With
    :func:`posenc.layout.pair_permutation` this converts between the layouts
    (``half = interleaved[perm]``), as llama.cpp's converter and transformers' GGUF
    loader do.

    Args:
        model: a Llama-style model.
        order: int64 (head_dim,), a permutation of range(head_dim).

    Raises:
        ValueError: ``order`` is not a permutation of range(head_dim).
    """
    layers = _attention_layers(model)
    head_dim = layers[0].head_dim
    if order.shape != (head_dim,) or not torch.equal(
        order.sort().values.cpu(), torch.arange(head_dim)
    ):
        raise ValueError(
            f"order must be a permutation of range(head_dim = {head_dim}), got shape "
            f"{tuple(order.shape)}"
        )
    with torch.no_grad():
        for attn in layers:
            for proj in (attn.q_proj, attn.k_proj):
                # (heads·d_h, d) → (heads, d_h, d): permute each head's rows
                weight = proj.weight.view(-1, head_dim, proj.weight.shape[-1])
                weight.copy_(weight[:, order.to(weight.device)])
                if proj.bias is not None:
                    bias = proj.bias.view(-1, head_dim)  # (heads, d_h)
                    bias.copy_(bias[:, order.to(bias.device)])
