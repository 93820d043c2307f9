"""The practitioner's tools, in one place: ``from posenc import tools``.

Each name is either re-exported from the module that implements it (its docstring is
that module's) or a thin wrapper documented here. By task:

* **positions of a padded batch**: :func:`padded_positions` (the prompt's, (B, T))
  and :func:`decode_positions` (the next tokens', (B, steps)). Under left padding the
  decode positions continue each row's prompt: they count the row's real tokens, not
  the batch width T.
* **RoPE layouts** (``"interleaved"``: Meta's original checkpoints, GPT-J, GGUF;
  ``"half"``: transformers' Llama, GPT-NeoX): :func:`convert_qk_layout` for a raw
  ``q_proj``/``k_proj`` weight or bias, :func:`convert_rope_layout` for a whole model
  (the book's TinyLM or a Llama-family transformers model, as a copy),
  :func:`permute_qk_rows` (a transformers model, in place), :func:`pair_permutation`.
* **a model's frequencies**: :func:`rope_inv_freq_from_config` (a transformers v5
  ``rope_parameters`` dict), and the position card (:func:`position_card`,
  :class:`PositionCard`, from :mod:`posenc.card`).
* **RoPE or its scaling in a transformers model**: :func:`swap_rope` (a context
  manager: other frequencies, another layout, an attention-level method).
* **remapped attention** (SelfExtend, Dual Chunk Attention, ReRoPE; longer context
  without fine-tuning): :func:`self_extend_attention`, :func:`dual_chunk_attention`,
  :func:`rerope_attention` for one's own attention (un-rotated q, k, v); for a
  transformers model, :func:`attention_method` builds the method with the model's RoPE
  settings for ``swap_rope(model, attention=...)``; :func:`self_extend_max_length`
  says how far a SelfExtend setting reaches.
* **score biases in one's own attention**: :func:`alibi_bias`, :func:`alibi_slopes`,
  :func:`t5_relative_position_bucket`.

Imports: this module is a façade at the level of :mod:`posenc.layers` (it imports
the encodings and the layers, nothing above); ``posenc.tools`` is imported only when
asked for, so ``import posenc`` stays light. It imports with torch and numpy alone:
:func:`swap_rope` and :func:`permute_qk_rows` (which work on transformers models) and
the card load on first use.

Shapes: B batch, T tokens, H heads, d_h ``head_dim``.
"""

from __future__ import annotations

import torch

from ._checks import check_int
from .alibi import alibi_bias, alibi_slopes
from .layers.masks import padded_positions
from .layers.remapped_attention import (
    dual_chunk_attention,
    rerope_attention,
    self_extend_attention,
)
from .layers.surgery import convert_rope_layout
from .layout import convert_qk_layout, pair_permutation
from .relative_buckets import t5_relative_position_bucket
from .remap import self_extend_max_length
from .rope_config import rope_inv_freq_from_config
from .schemes import PositionalScheme, available_schemes, build_scheme

__all__ = [
    "PositionCard",
    "alibi_bias",
    "alibi_slopes",
    "attention_method",
    "convert_qk_layout",
    "convert_rope_layout",
    "decode_positions",
    "dual_chunk_attention",
    "padded_positions",
    "pair_permutation",
    "permute_qk_rows",
    "position_card",
    "rerope_attention",
    "rope_inv_freq_from_config",
    "self_extend_attention",
    "self_extend_max_length",
    "swap_rope",
    "t5_relative_position_bucket",
]

#: Names served from :mod:`posenc.card` on first use (that module may be absent).
_CARD_NAMES = ("position_card", "PositionCard")
#: Names served from :mod:`posenc.layers.pretrained.swap` on first use: that package
#: also holds the wheel fetcher, whose imports the lean install does not have.
_SWAP_NAMES = ("permute_qk_rows", "swap_rope")


def __getattr__(name: str):
    """``position_card`` and ``PositionCard`` (:mod:`posenc.card`), ``swap_rope`` and
    ``permute_qk_rows`` (:mod:`posenc.layers.pretrained.swap`), imported when first
    asked for.

    Raises:
        ImportError: this version of posenc has no :mod:`posenc.card`; a package the
            pretrained models' layer needs is not installed.
        AttributeError: any other unknown name.
    """
    if name in _SWAP_NAMES:
        from .layers.pretrained import swap

        return getattr(swap, name)
    if name in _CARD_NAMES:
        try:
            from . import card
        except ModuleNotFoundError as error:
            if error.name != "posenc.card":
                raise
            raise ImportError(
                f"posenc.tools.{name} comes from posenc.card, which this version of "
                "posenc does not have; rope_inv_freq_from_config gives a config's "
                "frequencies and attention factor meanwhile"
            ) from None
        return getattr(card, name)
    raise AttributeError(f"module 'posenc.tools' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def decode_positions(attention_mask: torch.Tensor, steps: int = 1) -> torch.Tensor:
    """The positions of the next ``steps`` tokens of each row of a padded batch: they
    continue the row's prompt.

    A row with n real tokens (the mask's ones) had prompt positions 0 … n − 1
    (:func:`padded_positions`), so its next tokens sit at n, n + 1, …, n + steps − 1:
    the count of real tokens so far, not the batch width T. With left padding, T
    (``arange`` continued past the prompt) would put a row of n < T tokens T − n
    positions too far from its prompt, and positions restarting at 0 would put it
    before its own prompt; both change a RoPE model's scores (``book/cheatsheet.md``,
    "A batch scores differently from its texts one at a time", measures it). This is
    what transformers' ``generate`` does (5.23,
    ``GenerationMixin._prepare_position_ids_for_generation``, and the position ids it
    derives from the mask grown by one column per step: ``cumsum − 1`` of the last
    column).

    Args:
        attention_mask: (B, T) or (T,), 1 (or True) on the prompt's real tokens, 0 on
            pads (either side; with right padding the new tokens would come after the
            pads, which transformers warns against for decoder-only models).
        steps: how many tokens to place, ≥ 1 (one per decoding step; several for a
            draft of speculative decoding).

    Returns:
        int64 (B, steps) for a (B, T) mask, (steps,) for a (T,) mask, on the mask's
        device.

    Raises:
        ValueError: a mask that is not 1-D/2-D or holds values other than 0 and 1
            (from :func:`padded_positions`); ``steps`` < 1.
        TypeError: ``steps`` not an integer.

    Source: Hugging Face transformers 5.23, ``generation/utils.py``.
    """
    padded_positions(attention_mask)  # the mask's checks
    steps = check_int("steps", steps, minimum=1)
    count = (attention_mask != 0).sum(-1, keepdim=True)  # real tokens: (B, 1) or (1,)
    return count + torch.arange(steps, device=attention_mask.device)


def attention_method(model: torch.nn.Module, name: str, **settings) -> PositionalScheme:
    """An attention-level method (``"self_extend"``, ``"dual_chunk"``, ``"rerope"``:
    the registry's ``"attention"`` namespace) built with a Llama-family transformers
    model's own RoPE settings, for ``swap_rope(model, attention=...)``.

    The method keeps the model's frequencies (its rotary embedding's ``inv_freq``,
    whatever its ``rope_type``) and remaps the positions: SelfExtend groups distant
    positions, so a model reads past its trained length with no fine-tuning. For
    ``"self_extend"`` with the trained length L, ``group_size`` G and ``window_size``
    W, :func:`self_extend_max_length` is the longest input whose distances all stay
    below L (G = 8, W = L/4 reaches 6.25 L).

    Args:
        model: a Llama-family transformers model (``model.model.rotary_emb`` with one
            ``inv_freq``; ``model.config`` with ``num_attention_heads``).
        name: ``"self_extend"``, ``"dual_chunk"`` or ``"rerope"``.
        **settings: the method's own: ``group_size`` and ``window_size``
            (SelfExtend, Jin et al. 2024 §3); ``chunk_size``, ``pretraining_length``
            and ``local_window`` (DCA, An et al. 2024 §3); ``window`` and
            ``scaling_factor`` (ReRoPE, Su 2023).

    Returns:
        The method, a :class:`~posenc.schemes.PositionalScheme` on the model's device.

    Raises:
        TypeError: a model without a single rotary embedding (``inv_freq``).
        ValueError: an unknown method (the message lists them); bad settings (as the
            method checks them); a rotary embedding with an attention factor other
            than 1 (YaRN, LongRoPE), which the remapped attentions do not apply.
    """
    rotary = getattr(getattr(model, "model", model), "rotary_emb", None)
    inv_freq = getattr(rotary, "inv_freq", None)
    if not isinstance(inv_freq, torch.Tensor):
        raise TypeError(
            "attention_method needs a Llama-family transformers model with one rotary "
            f"embedding (model.model.rotary_emb.inv_freq); got {type(model).__name__}"
        )
    factor = float(getattr(rotary, "attention_scaling", 1.0))
    if factor != 1.0:
        raise ValueError(
            f"this model's rotary embedding scales cos and sin by {factor:g} (its "
            "rope_type's attention factor); the remapped attentions apply none, so "
            "they would change every score: use the model without its rope scaling"
        )
    if name not in available_schemes("attention"):
        known = ", ".join(map(repr, available_schemes("attention")))
        raise ValueError(f"unknown attention method {name!r}; known: {known}")
    config = model.config
    num_heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // num_heads
    return build_scheme(
        name,
        namespace="attention",
        d_model=num_heads * head_dim,
        num_heads=num_heads,
        inv_freq=inv_freq.detach().float().clone(),
        layout="half",
        **settings,
    ).to(inv_freq.device)
