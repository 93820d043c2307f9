"""The registry of positional schemes and the interface they implement.

A positional scheme acts at one or more of four plug-in points of the one attention in
:mod:`posenc.attention` (DESIGN.md, "Architecture"):

1. :meth:`PositionalScheme.embed` — add a position vector to the token embeddings
   (sinusoidal, learned);
2. :meth:`PositionalScheme.transform_qk` — transform queries and keys (RoPE);
3. :meth:`PositionalScheme.score_bias` — add ``b(m, n)`` to the attention scores before
   the softmax (ALiBi, T5, Shaw keys, Transformer-XL, DeBERTa);
4. :meth:`PositionalScheme.value_term` — add a term built from the attention weights to
   the output (Shaw values).

The base class is the identity at every point, which is exactly the scheme ``"none"``.
Schemes are registered by name with :func:`register_scheme` and built by name with
:func:`build_scheme`; the model, the experiments and the benchmarks only ever use names.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from ._checks import check_int

_REGISTRY: dict[str, type[PositionalScheme]] = {}


class PositionalScheme(nn.Module):
    """Base class: a scheme that adds no positional information at any plug-in point.

    Subclasses set ``name`` and override the plug-in points they use. Every method
    receives the positions explicitly, as int or float tensors, so that KV-cache offsets
    and interpolated positions need no special case: :meth:`embed` gets ``(T,)`` or
    ``(B, T)``; the attention-level points get ``(T,)`` or ``(B, 1, T)``, which
    broadcasts against the head dimension.

    Args:
        d_model: model width d.
        num_heads: number of heads H; ``d_model`` must be divisible by it.

    Raises:
        ValueError / TypeError: if the sizes are not positive integers or do not divide.
    """

    name: ClassVar[str] = ""
    #: True when :meth:`value_term` is used: the attention must then materialise its
    #: weights, so the fused ``scaled_dot_product_attention`` path cannot be taken.
    needs_attention_weights: ClassVar[bool] = False
    #: The longest sequence the scheme can encode (a learned table's size); None for no
    #: limit.
    max_positions: int | None = None
    #: Scores are scaled by 1/√(score_scale_factor · d_h); DeBERTa uses 3 (three score
    #: terms).
    score_scale_factor: ClassVar[float] = 1.0

    def __init__(self, *, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.num_heads = check_int("num_heads", num_heads, minimum=1)
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model must be divisible by num_heads, got d_model={self.d_model}, "
                f"num_heads={self.num_heads}"
            )
        self.head_dim = self.d_model // self.num_heads

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Plug-in point 1. ``x``: (B, T, d) token embeddings → (B, T, d)."""
        return x

    def transform_qk(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Plug-in point 2. ``q``: (B, H, T_q, d_h), ``k``: (B, H, T_k, d_h) → the same
        shapes."""
        return q, k

    def score_bias(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
    ) -> torch.Tensor | None:
        """Plug-in point 3. A bias broadcastable to (B, H, T_q, T_k), added to the
        scaled scores; ``None`` for no bias."""
        return None

    def value_term(
        self,
        weights: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
    ) -> torch.Tensor | None:
        """Plug-in point 4. ``weights``: (B, H, T_q, T_k) attention probabilities → a
        term (B, H, T_q, d_h) added to the attention output; ``None`` for no term."""
        return None

    def score_mod(self, q_positions: torch.Tensor, k_positions: torch.Tensor):
        """FlexAttention form of the score bias: a function
        ``(score, b, h, q_idx, kv_idx) → score`` that adds the bias without any T×T
        tensor, or ``None`` if the scheme has none (then a scheme with a score bias
        cannot take the ``"flex"`` attention path). Positions are (T,) or (B, 1, T), as
        for :meth:`score_bias`; with the latter, ``b`` picks the row."""
        return None

    def extra_repr(self) -> str:
        return f"name={self.name!r}, d_model={self.d_model}, num_heads={self.num_heads}"


def sequence_positions(positions: torch.Tensor) -> torch.Tensor:
    """Positions as (T,) or (B, T), whichever level they come from.

    The attention hands the plug-in points (B, 1, T) positions, whose singleton axis
    broadcasts against the heads; a scheme that lays out its own head axis (ALiBi's
    slopes, T5's per-head table) first drops it with this function, so that (T,) gives a
    bias (H, T_q, T_k) and (B, T) a bias (B, H, T_q, T_k).

    Args:
        positions: (T,), (B, T) or (B, 1, T), integer or float.

    Returns:
        The same values, (T,) or (B, T) (a view, no copy).

    Raises:
        ValueError: any other shape (the message gives it).
    """
    if positions.dim() == 3 and positions.shape[1] == 1:
        return positions[:, 0]
    if positions.dim() in (1, 2):
        return positions
    raise ValueError(
        f"positions must have shape (T,), (B, T) or (B, 1, T), "
        f"got {tuple(positions.shape)}"
    )


def register_scheme(cls: type[PositionalScheme]) -> type[PositionalScheme]:
    """Class decorator: register a :class:`PositionalScheme` subclass under
    ``cls.name``.

    Raises:
        TypeError: if ``cls`` is not a PositionalScheme subclass.
        ValueError: if its name is empty or already registered.
    """
    if not (isinstance(cls, type) and issubclass(cls, PositionalScheme)):
        raise TypeError(
            f"only PositionalScheme subclasses can be registered, got {cls!r}"
        )
    if not cls.name:
        raise ValueError(
            f"{cls.__name__} has an empty name; set the class attribute 'name'"
        )
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(
            f"a scheme named {cls.name!r} is already registered ({_REGISTRY[cls.name]})"
        )
    _REGISTRY[cls.name] = cls
    return cls


def available_schemes() -> tuple[str, ...]:
    """The registered scheme names, in registration order."""
    return tuple(_REGISTRY)


def get_scheme_class(name: str) -> type[PositionalScheme]:
    """The class registered under ``name``.

    Raises:
        ValueError: if no scheme has that name (the message lists the known names).
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        known = ", ".join(map(repr, _REGISTRY))
        raise ValueError(
            f"unknown positional scheme {name!r}; known schemes: {known}"
        ) from None


def build_scheme(
    name: str, *, d_model: int, num_heads: int, **options
) -> PositionalScheme:
    """Build the scheme registered under ``name``.

    Args:
        name: a registered name, see :func:`available_schemes`.
        d_model: model width d.
        num_heads: number of heads H.
        **options: the scheme's own options (e.g. ``base``, ``layout`` for
            ``"sinusoidal"``, ``max_len`` for ``"learned"``).

    Raises:
        ValueError: for an unknown name; whatever the scheme raises for bad options.
    """
    return get_scheme_class(name)(d_model=d_model, num_heads=num_heads, **options)


@register_scheme
class NoPosition(PositionalScheme):
    """``"none"``: no positional information at all (NoPE). Attention is then
    permutation-equivariant; a causal mask alone still leaks order (Haviv et al.
    2022)."""

    name = "none"
