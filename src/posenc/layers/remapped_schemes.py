"""SelfExtend, ReRoPE and Dual Chunk Attention as attention-level methods: the
registry's ``"attention"`` namespace (:data:`posenc.schemes.NAMESPACES`).

Each class wraps one function pair of :mod:`.remapped_attention` (fast path, naive
reference) behind :meth:`~posenc.schemes.PositionalScheme.attend`, so that the one
attention (:class:`~posenc.layers.attention.MultiHeadAttention`) and a real model
(:func:`posenc.layers.pretrained.swap_rope`, argument ``attention``) run a trained RoPE
model the method's way, with no fine-tuning. They are built by name,
``build_scheme("self_extend", namespace="attention", d_model=..., num_heads=...,
group_size=..., window_size=...)``, and registered when :mod:`posenc.layers` is
imported; the book's runs and the study iterate the ``"1d"`` namespace, never this
one.

The RoPE settings are the model's: ``base`` (b, transformers' ``rope_theta``) or an
explicit ``inv_freq`` (rotary_dim/2,), and the pair ``layout``. Queries and keys reach
:meth:`attend` un-rotated, so a KV cache holds un-rotated keys and the method rotates
them at every step (the authors' decoding path for SelfExtend and ReRoPE); the
positions may be shared by the batch, (1, 1, T), or one row per sequence, (B, 1, T),
each row then attending as it would alone; a padded batch also passes
``attention_mask`` (B, T_k) to :meth:`~_RemappedRope.attend`, which drops each row's
pad keys.
"""

from __future__ import annotations

import torch

from .._checks import check_choice
from ..frequencies import DEFAULT_BASE
from ..remap import check_dual_chunk, check_rerope, check_self_extend
from ..rope import ROPE_LAYOUTS
from ..schemes import ATTEND_NAMESPACE, PositionalScheme, register_scheme
from . import remapped_attention as ra


def _key_positions(k_positions: torch.Tensor, name: str) -> torch.Tensor:
    """The attention's (B′, 1, T_k), or a direct call's (T_k,) or (B, T_k), as the
    (T_k,) or (B′, T_k) positions of :mod:`.remapped_attention` (one row per
    sequence)."""
    if k_positions.dim() == 3 and k_positions.shape[1] == 1:
        k_positions = k_positions[:, 0]
    if k_positions.dim() == 2 and k_positions.shape[0] == 1:
        return k_positions[0]
    if k_positions.dim() in (1, 2):
        return k_positions
    raise ValueError(
        f"{name} needs key positions (T_k,), (B, T_k) or (B′, 1, T_k); got "
        f"{tuple(k_positions.shape)}"
    )


class _RemappedRope(PositionalScheme):
    """The common part: RoPE's settings and the dispatch to the method's functions."""

    hooks = frozenset({"attend"})
    _fast = staticmethod(ra.self_extend_attention)
    _reference = staticmethod(ra.self_extend_attention_reference)

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        base: float = DEFAULT_BASE,
        inv_freq: torch.Tensor | None = None,
        layout: str = "half",
    ) -> None:
        super().__init__(d_model=d_model, num_heads=num_heads)
        self.base = float(base)
        self.layout = check_choice("layout", layout, ROPE_LAYOUTS)
        if inv_freq is not None and (
            not isinstance(inv_freq, torch.Tensor)
            or inv_freq.dim() != 1
            or not 0 < 2 * inv_freq.numel() <= self.head_dim
        ):
            raise ValueError(
                "inv_freq must be a tensor of shape (rotary_dim/2,) with rotary_dim <= "
                f"head_dim = {self.head_dim}, got {inv_freq!r}"
            )
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def settings(self) -> dict:
        """The method's own keyword arguments."""
        raise NotImplementedError

    def attend(
        self,
        q,
        k,
        v,
        q_positions,
        k_positions,
        *,
        scale,
        need_weights=False,
        attention_mask=None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`posenc.schemes.PositionalScheme.attend` by the method's fast path
        (``need_weights=False``) or its naive reference (``True``, which returns the
        weights). ``k_positions`` (B′, 1, T_k), B′ ∈ {1, B}: each row of the batch
        attends with its own positions; the queries are the last T_q keys.
        ``attention_mask``: None, or (B, T_k) 0/1 or bool, 1 on real tokens, as
        transformers' ``attention_mask`` (a column per key, a KV cache's included):
        pad keys get no weight and a pad query's output is zeros
        (:mod:`posenc.layers.remapped_batch`); a bad mask raises as
        :func:`posenc.layers.remapped_attention.self_extend_attention` says."""
        positions = _key_positions(k_positions, self.name)
        options = dict(
            attention_mask=attention_mask,
            positions=positions,
            inv_freq=self.inv_freq,
            base=self.base,
            layout=self.layout,
            scale=scale,
            **self.settings(),
        )
        if need_weights:
            return type(self)._reference(q, k, v, **options)
        return type(self)._fast(q, k, v, **options), None


@register_scheme(namespace=ATTEND_NAMESPACE)
class SelfExtend(_RemappedRope):
    """``"self_extend"``: SelfExtend (Jin et al., ICML 2024, §3): neighbour positions
    within ``window_size`` W, grouped positions ⌊·/G⌋ beyond
    (:func:`posenc.layers.remapped_attention.self_extend_attention`).

    Args: ``group_size`` G ≥ 1, ``window_size`` W ≥ 1, and RoPE's ``base``,
    ``inv_freq``, ``layout``. Raises: as :func:`posenc.remap.check_self_extend`.
    """

    name = "self_extend"

    def __init__(self, *, group_size: int, window_size: int, **rope) -> None:
        super().__init__(**rope)
        self.group_size, self.window_size = check_self_extend(group_size, window_size)

    def settings(self) -> dict:
        return {"group_size": self.group_size, "window_size": self.window_size}


@register_scheme(namespace=ATTEND_NAMESPACE)
class ReRoPE(_RemappedRope):
    """``"rerope"``: ReRoPE (Su 2023), distances clipped at ``window`` W, or leaky
    ReRoPE with ``scaling_factor`` k (:func:`posenc.layers.remapped_attention.
    rerope_attention`).

    Args: ``window`` W ≥ 1, ``scaling_factor`` k > 1 or None, RoPE's settings.
    Raises: as :func:`posenc.remap.check_rerope`.
    """

    name = "rerope"
    _fast = staticmethod(ra.rerope_attention)
    _reference = staticmethod(ra.rerope_attention_reference)

    def __init__(self, *, window: int, scaling_factor: float | None = None, **rope):
        super().__init__(**rope)
        self.window, k = check_rerope(window, scaling_factor)
        self.scaling_factor = None if scaling_factor is None else k

    def settings(self) -> dict:
        return {"window": self.window, "scaling_factor": self.scaling_factor}


@register_scheme(namespace=ATTEND_NAMESPACE)
class DualChunk(_RemappedRope):
    """``"dual_chunk"``: Dual Chunk Attention (An et al., ICML 2024, §3): intra-,
    successive- and inter-chunk positions (:func:`posenc.layers.remapped_attention.
    dual_chunk_attention`).

    Args: ``chunk_size`` s, ``pretraining_length`` c, ``local_window`` w (default
    c − s), RoPE's settings. Raises: as :func:`posenc.remap.check_dual_chunk`.
    """

    name = "dual_chunk"
    _fast = staticmethod(ra.dual_chunk_attention)
    _reference = staticmethod(ra.dual_chunk_attention_reference)

    def __init__(
        self,
        *,
        chunk_size: int,
        pretraining_length: int,
        local_window: int | None = None,
        **rope,
    ) -> None:
        super().__init__(**rope)
        s, w, c = check_dual_chunk(chunk_size, local_window, pretraining_length)
        self.chunk_size, self.local_window, self.pretraining_length = s, w, c

    def settings(self) -> dict:
        return {
            "chunk_size": self.chunk_size,
            "local_window": self.local_window,
            "pretraining_length": self.pretraining_length,
        }
