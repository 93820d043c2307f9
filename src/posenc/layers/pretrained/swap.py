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
import copy
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


def _norm_span(attn: torch.nn.Module, name: str, width: int) -> str | None:
    """Where the layer's ``q_norm`` or ``k_norm`` acts on a projection of ``width`` =
    heads·d_h features, read from the norm's weight as transformers builds it: over
    each head's d_h features (``"head"``: Qwen3, Gemma 3; weight (d_h,) or (heads,
    d_h)) or over the whole projection before the heads are split (``"projection"``:
    OLMo 2, weight (heads·d_h,)); None without a norm.

    Raises:
        TypeError: a norm whose weight matches neither (the message names the layer).
    """
    norm = getattr(attn, name, None)
    if norm is None or isinstance(norm, torch.nn.Identity):
        return None
    weight = getattr(norm, "weight", None)
    shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else None
    if shape == (width,) and width != attn.head_dim:
        return "projection"
    if shape is not None and shape[-1:] == (attn.head_dim,):
        return "head"
    raise TypeError(
        f"swap_rope cannot tell where {type(attn).__name__}.{name} normalizes: its "
        f"weight has shape {shape}, neither (head_dim,) = ({attn.head_dim},) (each "
        f"head, as Qwen3) nor ({width},) (the whole projection, as OLMo 2)"
    )


def _normed(attn, name: str, x: torch.Tensor, shape: tuple) -> torch.Tensor:
    """A projection x (B, T, heads·d_h) as (B, T, heads, d_h), with the layer's
    ``q_norm``/``k_norm`` applied where transformers 5.23 applies it, before RoPE:
    per head after the split (``models/qwen3/modeling_qwen3.py``) or on the whole
    projection before it (``models/olmo2/modeling_olmo2.py``)."""
    span = _norm_span(attn, name, x.shape[-1])
    if span == "projection":
        return getattr(attn, name)(x).view(shape)
    if span == "head":
        return getattr(attn, name)(x.view(shape))
    return x.view(shape)


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
    q = _normed(attn, "q_norm", attn.q_proj(hidden_states), shape).transpose(1, 2)
    k = _normed(attn, "k_norm", attn.k_proj(hidden_states), shape).transpose(1, 2)
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
        return _method_attention(
            attn, q, k, v, position_ids, attention_mask, past_key_values, rope
        )
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
    if hasattr(attn, "sliding_window"):  # Mistral, Qwen3: as their attention passes it
        kwargs["sliding_window"] = attn.sliding_window
    out, weights = interface(
        attn, q, k, v, attention_mask, dropout=0.0, scaling=attn.scaling, **kwargs
    )
    # out (B, T, H, d_h) as transformers' interfaces return it → (B, T, H·d_h)
    return attn.o_proj(out.reshape(*shape[:-2], -1).contiguous()), weights


def _streaming_attention(attn, q, k, v, position_ids, rope, rotation):
    """StreamingLLM inside a Llama attention: the unrotated k and v go into the
    layer's :class:`~posenc.layers.kv_cache.StreamingLayerKVCache`, then q and every
    kept key are rotated at their cache slots (Xiao et al. 2024, §3.2)."""
    if not torch.equal(position_ids, position_ids[:1].expand_as(position_ids)):
        raise ValueError(
            "streaming reads one sequence: its cache slots are shared by the batch, "
            "so every row needs the same position_ids; score the rows one at a time"
        )
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


def _method_attention(
    attn, q, k, v, position_ids, attention_mask, past_key_values, rope
):
    """An attention-level method (the registry's ``"attention"`` namespace) inside a
    Llama attention: un-rotated k and v go into transformers' cache, and the method
    attends from the un-rotated q and every cached key, rotating them itself.

    Each row of the batch attends as it would alone: the keys its last query may not
    see (the row's left padding, read from the 4-D attention mask of
    ``attn_implementation`` ``"sdpa"`` or ``"eager"``) are dropped, the rest sit at
    consecutive positions ending at the row's last query's ``position_ids`` (pass
    ``posenc.tools.padded_positions(attention_mask)``, then ``decode_positions``); a
    padding query's output is zero."""
    if past_key_values is not None:
        k, v = past_key_values.update(k, v, attn.layer_idx)
    name = rope["attention"].name
    t_q, t_k = q.shape[-2], k.shape[-2]
    kept = _kept_keys(attention_mask, q.shape[0], t_q, t_k, name)  # (B, T_k) bool
    rows = _row_positions(kept, position_ids.to(q.device), t_q, name)
    method = rope["attention"]
    if all(positions.numel() == t_k for positions in rows):  # no padding: one call
        positions = torch.stack(rows)[:, None]  # (B, 1, T_k)
        out, _ = method.attend(
            q, k, v, positions[..., t_k - t_q :], positions, scale=attn.scaling
        )
    else:
        out = q.new_zeros(q.shape)  # a padding query's output stays zero
        for b, positions in enumerate(rows):
            n = positions.numel()
            if n == 0:
                continue
            n_q = min(n, t_q)  # the row's real queries: its last n_q
            part, _ = method.attend(
                q[b : b + 1, :, t_q - n_q :],
                k[b : b + 1, :, t_k - n :],
                v[b : b + 1, :, t_k - n :],
                positions[None, None, n - n_q :],
                positions[None, None],
                scale=attn.scaling,
            )
            out[b, :, t_q - n_q :] = part[0]
    out = out.transpose(1, 2).reshape(*out.shape[:1], out.shape[2], -1)  # (B, T, H·d_h)
    return attn.o_proj(out), None


def _kept_keys(attention_mask, batch, t_q, t_k, name) -> torch.Tensor:
    """(B, T_k) bool: the keys each row attends to, from transformers' 4-D mask (B or
    1, 1, T_q, ≥ T_k) — bool (True: attend, SDPA) or additive (0: attend, eager) —
    or all of them without a mask. The keys are those the row's last query sees, and
    every other query must see exactly the kept keys up to its own (a left-padded,
    causal row); a sliding window or right padding is refused."""
    if attention_mask is None:
        return torch.ones(batch, t_k, dtype=torch.bool)
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 4:
        raise TypeError(
            f"{name} inside swap_rope reads the padding from transformers' 4-D "
            f"attention mask; got {type(attention_mask).__name__}: load the model "
            "with attn_implementation='sdpa' or 'eager'"
        )
    mask = attention_mask[:, 0, -t_q:, :t_k]  # (B or 1, T_q, T_k)
    if mask.dtype != torch.bool:
        mask = mask > torch.finfo(mask.dtype).min / 2
    mask = mask.expand(batch, t_q, t_k).cpu()
    kept = mask[:, -1]  # (B, T_k): what each row's last query sees
    n_q = torch.minimum(kept.sum(1), torch.tensor(t_q))  # the real queries, per row
    slot = torch.arange(t_k - t_q, t_k)  # the key slot of each query
    causal = torch.arange(t_k)[None, :] <= slot[:, None]  # (T_q, T_k)
    for b in range(batch):
        real = slice(t_q - int(n_q[b]), t_q)
        if not torch.equal(mask[b, real], kept[b] & causal[real]):
            raise ValueError(
                f"{name} inside swap_rope needs each row to be left-padded and "
                f"causal (every token sees all the row's tokens up to its own); row "
                f"{b}'s attention mask is not (a sliding window or right padding): "
                "pad on the left (tokenizer.padding_side = 'left') and use a model "
                "without sliding-window layers"
            )
    return kept


def _row_positions(kept, position_ids, t_q, name) -> list[torch.Tensor]:
    """Each row's kept keys' positions, int64 (n_b,): consecutive, ending at the row's
    last query's position; checked against the row's real queries' position_ids."""
    rows = []
    for b in range(kept.shape[0]):
        n = int(kept[b].sum())
        if not kept[b, kept.shape[1] - n :].all():
            raise ValueError(
                f"{name} inside swap_rope needs left padding (pads first, then the "
                f"row's tokens); row {b} of the attention mask has pads after tokens"
            )
        row = position_ids[b if position_ids.shape[0] > 1 else 0]
        last = int(row[-1])
        positions = torch.arange(last - n + 1, last + 1, device=position_ids.device)
        n_q = min(n, t_q)
        consecutive = torch.equal(row[t_q - n_q :], positions[n - n_q :])
        if n and (last - n + 1 < 0 or not consecutive):
            raise ValueError(
                f"{name} inside swap_rope needs each row's positions to be "
                f"consecutive over its tokens and its cache (row {b}: {n} keys, the "
                f"queries at {row[t_q - n_q :].tolist()}); pass position_ids from "
                "posenc.tools.padded_positions(attention_mask) and, when decoding, "
                "posenc.tools.decode_positions"
            )
        rows.append(positions)
    return rows


#: The largest relative difference, per dtype, between a layer's own forward and
#: swap_rope's rebuild of it (:func:`_check_reproduced`) that is rounding; a part of
#: the attention left out differs by far more.
_PROBE_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4}


def _probe(model, rotary, attn) -> tuple:
    """The check's inputs: hidden states (2, 5, d) (random at the unit scale and 4
    times it: small scores show sinks, large ones a soft-cap), positions 3..7, the
    rotary embedding's (cos, sin), and the same RoPE as swap_rope's settings.

    The rotary embedding runs as a copy (dynamic and LongRoPE embeddings change their
    inv_freq with the length they see; the model's own keeps its state), and its
    inv_freq is read after the call."""
    weight = attn.q_proj.weight
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(1, 5, weight.shape[-1], generator=generator)
    hidden = torch.cat([hidden, 4 * hidden]).to(weight.device, weight.dtype)
    position_ids = torch.arange(3, 8, device=weight.device).expand(2, 5)  # not from 0
    rotary = copy.deepcopy(rotary)
    try:
        with torch.no_grad():
            cos_sin = rotary(hidden, position_ids)
    except Exception as error:  # noqa: BLE001 - any failure is a refusal
        raise TypeError(
            f"swap_rope could not call {type(model).__name__}'s rotary embedding as "
            f"rotary_emb(hidden_states, position_ids) to check the layers: {error}"
        ) from error
    rope = {"inv_freq": rotary.inv_freq.float(), "layout": "half", "record": None,
            "attention_factor": float(getattr(rotary, "attention_scaling", 1.0)),
            "streaming": None, "attention": None}  # fmt: skip
    return hidden, position_ids, cos_sin, rope


def _check_reproduced(model: torch.nn.Module, layers: list[torch.nn.Module]) -> None:
    """swap_rope rebuilds each attention from its parts: the q, k, v projections,
    ``q_norm``/``k_norm``, RoPE in the half layout, the model's attention function and
    ``o_proj``. Each kind of layer is run both ways on 5 random tokens with the model's
    own rotary embedding (``model.model.rotary_emb``); a layer that computes something
    else (a logit soft-cap, sinks, a norm after RoPE, layers without RoPE, another
    layout, per-layer-type rotary embeddings) is refused, never silently replaced.

    Raises:
        TypeError: no single rotary embedding, or a layer swap_rope does not
            reproduce (the message names it and the difference).
    """
    rotary = getattr(getattr(model, "model", model), "rotary_emb", None)
    if not isinstance(getattr(rotary, "inv_freq", None), torch.Tensor):
        raise TypeError(
            "swap_rope checks that it reproduces the model's attention with the "
            "model's own rotary embedding (model.model.rotary_emb with one inv_freq); "
            f"{type(model).__name__} has none (per-layer-type rotary embeddings, as "
            "Gemma 3's, are not supported)"
        )
    for attn in layers:
        _norm_span(attn, "q_norm", attn.q_proj.out_features)
        _norm_span(attn, "k_norm", attn.k_proj.out_features)
        if getattr(attn, "attn_logit_softcapping", None) is not None:
            raise TypeError(
                f"swap_rope does not apply {type(attn).__name__}'s logit soft-cap "
                f"(attn_logit_softcapping = {attn.attn_logit_softcapping}, Gemma 2)"
            )
    hidden, position_ids, cos_sin, rope = _probe(model, rotary, layers[0])
    kinds = set()
    for attn in layers:
        kind = (type(attn), *(getattr(attn, a, None) for a in ("sliding_window",
                "layer_type", "use_rope", "attn_logit_softcapping")))  # fmt: skip
        if kind in kinds:
            continue
        kinds.add(kind)
        training, _ = attn.training, attn.eval()
        try:
            with torch.no_grad():
                own = attn(
                    hidden,
                    position_embeddings=cos_sin,
                    attention_mask=None,
                    position_ids=position_ids,
                )[0]
                ours = _posenc_attention(
                    attn, hidden, position_ids=position_ids, rope=rope
                )[0]
        except Exception as error:  # noqa: BLE001 - any failure is a refusal
            raise TypeError(
                f"swap_rope could not run {type(attn).__name__} (layer "
                f"{attn.layer_idx}) with the model's rotary embedding to check it: "
                f"{error}"
            ) from error
        finally:
            attn.train(training)
        scale = own.abs().amax((1, 2), keepdim=True).clamp_min(1e-30)
        difference = float(((ours - own).abs() / scale).max())
        if not difference <= _PROBE_TOLERANCE.get(own.dtype, 3e-2):
            raise TypeError(
                f"swap_rope does not reproduce {type(attn).__name__} (layer "
                f"{attn.layer_idx}): with the model's own RoPE its output differs "
                f"from the layer's own by {difference:.3g} of its size. swap_rope "
                "rebuilds a "
                "Llama-style attention (q/k/v projections, q_norm/k_norm before RoPE, "
                "RoPE in the half layout, the model's attention function); this layer "
                "computes something more (a soft-cap, sinks, a norm after RoPE, "
                "another layout or no RoPE)"
            )


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


def _checked_inv_freq(model, head_dim: int, inv_freq) -> torch.Tensor:
    """swap_rope's frequencies: ``base^(−2i/head_dim)`` with the model's base by
    default; a given one checked to be (rotary_dim/2,) with rotary_dim ≤ head_dim."""
    if inv_freq is None:
        return compute_inv_freq(head_dim, rope_config(model)["base"])
    if inv_freq.dim() != 1 or not 0 < 2 * inv_freq.numel() <= head_dim:
        raise ValueError(
            f"inv_freq must have shape (rotary_dim/2,) with rotary_dim <= head_dim = "
            f"{head_dim}, got {tuple(inv_freq.shape)}"
        )
    return inv_freq


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
    model's weights, applies ``q_norm``/``k_norm`` where transformers does (per head:
    Qwen3; the whole projection: OLMo 2), rotates q and k with
    :func:`posenc.rope.apply_rope` at the model's ``position_ids`` (B, T) and attends
    with the model's attention implementation. On exit the model is as it was. A
    layer the swap would not reproduce (a soft-cap, sinks, Llama 4, per-layer-type
    RoPE, another layout) is refused, never replaced (:func:`_check_reproduced`).

    Args:
        model: a Llama-style model (Llama, Mistral, Qwen2/3, OLMo 2, ...) with one
            rotary embedding, ``model.model.rotary_emb``.
        inv_freq: (rotary_dim/2,) frequencies θ_i in radians per position; default
            ``base^(−2i/head_dim)`` with the model's base (unscaled; the model's own:
            its rotary embedding's ``inv_freq`` and ``attention_scaling``).
        attention_factor: multiplies cos and sin (YaRN's temperature).
        layout: ``"half"`` (transformers' Llama weights) or ``"interleaved"``.
        rotate: False rotates nothing (the model sees only the causal mask).
        record: called as ``record(layer_index, q, k)`` with the unrotated q (B, H, T,
            d_h) and k (B, H_kv, T, d_h) of every layer, after q_norm and k_norm.
        streaming: a :class:`~posenc.layers.kv_cache.StreamingKVCache`, one layer per
            attention layer: keys kept unrotated, rotated at their cache slots
            (StreamingLLM); one sequence (see :func:`streaming_token_losses`).
        attention: a scheme of the registry's ``"attention"`` namespace built with the
            model's RoPE (:func:`posenc.tools.attention_method`): it replaces rotation
            and attention; the cache holds un-rotated keys; a left-padded batch
            attends row by row as alone (:func:`_method_attention`).

    Yields:
        The model.

    Raises:
        TypeError: no Llama-style attention layers or single rotary embedding; a
            layer the swap does not reproduce (named); ``rotate`` not a bool.
        ValueError: an unknown layout; inv_freq not 1-D or longer than head_dim/2;
            inside the block, with ``attention``, right padding, a sliding window or
            a gap in a row's positions; with ``streaming``, rows at other positions.

    Source: transformers 5.23, ``models/llama/modeling_llama.py``,
    ``models/qwen3/modeling_qwen3.py``, ``models/olmo2/modeling_olmo2.py``.
    """
    layers = _attention_layers(model)
    inv_freq = _checked_inv_freq(model, layers[0].head_dim, inv_freq)
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    if not isinstance(rotate, bool):
        raise TypeError(f"rotate must be a bool, got {rotate!r}")
    _check_extras(attention, streaming, len(layers))
    _check_reproduced(model, layers)
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
