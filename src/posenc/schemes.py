"""The registry of positional schemes and the interface they implement.

A positional scheme acts at one or more of four plug-in points of the one attention in
:mod:`posenc.layers.attention` (book/design.md, "Architecture"):

1. :meth:`PositionalScheme.embed` — add a position vector to the token embeddings
   (sinusoidal, learned);
2. :meth:`PositionalScheme.transform_qk` — transform queries and keys (RoPE);
3. :meth:`PositionalScheme.score_bias` — add ``b(m, n)`` to the attention scores before
   the softmax (ALiBi, T5, Shaw keys, Transformer-XL, DeBERTa); for fused kernels the
   same bias without a T×T tensor, as a FlexAttention :meth:`PositionalScheme.score_mod`
   or folded into q and k by :meth:`PositionalScheme.augment_qk`;
4. :meth:`PositionalScheme.value_term` — add a term built from the attention weights to
   the output (Shaw values);

and an attention-level method of the ``"attention"`` namespace (below) replaces the
attention's softmax(q·kᵀ)·v itself, at :meth:`PositionalScheme.attend`.

Positions, one shape per level (B′ ∈ {1, B}: 1 when the batch shares them):

* point 1, :meth:`PositionalScheme.embed`, gets the model's positions, (T,) or (B, T);
* points 2–4 and the fused forms get the attention's, always (B′, 1, T), checked and
  shaped once at its boundary (:func:`posenc.layers.attention.head_positions`); the
  singleton axis broadcasts against the heads of q and k (B, H, T, d_h);
* a scheme of grid positions (``position_axes`` = A > 1, namespace ``"2d"``) gets
  (A, T) or (A, B, T) at point 1 and (B′, 1, T, A) at points 2–4.

A 1-D scheme's points 2–4 may also be called directly with (T,) positions, as the
chapters do to show a bias shared by the batch: written with broadcasting (as every
registered scheme is), a point then returns the same result as for the attention's
(1, 1, T). A bias of positions alone (ALiBi, T5) has no batch axis for positions the
batch shares, (H, T_q, T_k), and (B, H, T_q, T_k) for per-row ones
(:func:`sequence_positions`).

A scheme **declares** the points it uses in its class attribute
:attr:`PositionalScheme.hooks` (the names of the methods it overrides); the model and
the attention read that declaration to decide what to call and which attention paths
can serve the scheme, and ``tests/test_schemes.py`` checks that every registered
scheme's declaration names exactly the methods it overrides.

The base class is the identity at every point, which is exactly the scheme ``"none"``.
Schemes are registered by name with :func:`register_scheme` and built by name with
:func:`build_scheme`; the model, the experiments and the benchmarks only ever use names.
A 1-D scheme may be a condition of the study only (:attr:`PositionalScheme.study_only`,
FIRE and Kerple): the tests check it like every other, but the chapters' runs
(:func:`chapter_schemes`) leave it out.
Names live in a namespace (:data:`NAMESPACES`): ``"1d"`` (the default) for schemes of
sequence positions, ``"2d"`` for the tiny ViT's schemes of (row, column) positions
(:mod:`posenc.layers.vit`), which the language model's runs do not iterate, and
``"attention"`` for attention-level methods of a RoPE model that replace how scores are
formed rather than adding to them (SelfExtend, ReRoPE, Dual Chunk Attention:
:mod:`posenc.layers.remapped_schemes`, registered when :mod:`posenc.layers` is
imported, or at the first lookup in that namespace). Such a method declares a fifth
point, :meth:`PositionalScheme.attend`, which takes the place of the attention's
softmax(q·kᵀ)·v; it is a way to *run* a trained RoPE model, not a scheme to train, so
neither the book's runs nor the study iterate it.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from ._checks import check_int

#: The registry's namespaces and the number of coordinates a position has in each:
#: ``"1d"``, a sequence (positions (T,) or (B, T); (B′, 1, T) inside the attention),
#: the language model's schemes and the default; ``"2d"``, an image grid (positions
#: (2, T) or (2, B, T), rows (row, column); (B′, 1, T, 2) inside the attention), the
#: tiny ViT's schemes (:mod:`posenc.layers.vit`). The book's runs, the study grid and
#: the tests of the positions contract iterate ``"1d"`` only.
#: ``"attention"``, attention-level methods over sequence positions (hook ``"attend"``).
NAMESPACES = {"1d": 1, "2d": 2, "attention": 1}
#: The namespace whose schemes, and only whose schemes, declare ``"attend"``.
ATTEND_NAMESPACE = "attention"
DEFAULT_NAMESPACE = "1d"

_REGISTRY: dict[str, dict[str, type[PositionalScheme]]] = {n: {} for n in NAMESPACES}

#: The plug-in points a scheme may declare in :attr:`PositionalScheme.hooks`: the names
#: of the methods that implement them, in the order a forward pass reaches them.
HOOKS = (
    "embed",
    "transform_qk",
    "score_bias",
    "score_mod",
    "augment_qk",
    "value_term",
    "attend",
)


class PositionalScheme(nn.Module):
    """Base class: a scheme that adds no positional information at any plug-in point.

    Subclasses set ``name``, override the plug-in points they use and declare them in
    ``hooks``, e.g. ``hooks = frozenset({"score_bias", "score_mod"})`` for ALiBi; a
    point that is not declared is never called by the model or the attention. Every
    method receives the positions explicitly, as int or float tensors, so that KV-cache
    offsets and interpolated positions need no special case: :meth:`embed` gets the
    model's ``(T,)`` or ``(B, T)``; the attention-level points get the attention's one
    shape, ``(B′, 1, T)`` with B′ ∈ {1, B}, which broadcasts against the head
    dimension (and, on a direct call, also ``(T,)``: see the module docstring). A
    scheme of grid positions (``position_axes = 2``, namespace ``"2d"``) gets ``(2,
    T)`` or ``(2, B, T)`` at :meth:`embed` and ``(B′, 1, T, 2)`` at the attention's
    points.

    Args:
        d_model: model width d.
        num_heads: number of heads H; ``d_model`` must be divisible by it.

    Raises:
        ValueError / TypeError: if the sizes are not positive integers or do not divide.
    """

    name: ClassVar[str] = ""
    #: The plug-in points the scheme uses, names from :data:`HOOKS`: ``"embed"``
    #: (point 1), ``"transform_qk"`` (2), ``"score_bias"`` (3) with its fused forms
    #: ``"score_mod"`` and ``"augment_qk"``, ``"value_term"`` (4); ``"attend"`` (the
    #: ``"attention"`` namespace's methods, in place of the whole softmax). Empty for
    #: "none".
    hooks: ClassVar[frozenset[str]] = frozenset()
    #: True when :meth:`value_term` is used (set from ``hooks``, not by hand): the
    #: attention must then materialise its weights, so the fused
    #: ``scaled_dot_product_attention`` path cannot be taken.
    needs_attention_weights: ClassVar[bool] = False
    #: The longest sequence the scheme can encode (a learned table's size); None for no
    #: limit.
    max_positions: int | None = None
    #: Scores are scaled by 1/√(score_scale_factor · d_h); DeBERTa uses 3 (three score
    #: terms).
    score_scale_factor: ClassVar[float] = 1.0
    #: How many coordinates a position has: 1 (a sequence; positions (T,) or (B, T))
    #: or 2 (an image grid; positions (2, T) or (2, B, T), rows (row, column)). It
    #: fixes the namespace the scheme is registered in (:data:`NAMESPACES`), the
    #: shape :class:`~posenc.layers.attention.MultiHeadAttention` accepts, and the
    #: shape of its inside: (B′, 1, T) for 1, (B′, 1, T, A) for A > 1.
    position_axes: ClassVar[int] = 1
    #: True for a 1-D scheme that is a condition of the study only, not a run of the
    #: chapters (FIRE, Kerple): :func:`available_schemes` still lists it, so every
    #: registry-wide test checks it, but :func:`chapter_schemes` leaves it out, and so
    #: do :func:`posenc.experiments.book_runs` and the study grid's default conditions
    #: (it joins the study only when added to the grid explicitly).
    study_only: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs) -> None:
        """Check the declared ``hooks`` and derive ``needs_attention_weights``.

        Raises:
            ValueError: a hook name not in :data:`HOOKS`, naming the class.
        """
        super().__init_subclass__(**kwargs)
        unknown = sorted(set(cls.hooks) - set(HOOKS))
        if unknown:
            raise ValueError(
                f"{cls.__name__}.hooks names unknown plug-in points {unknown}; the "
                f"points are {HOOKS}"
            )
        cls.hooks = frozenset(cls.hooks)
        cls.needs_attention_weights = "value_term" in cls.hooks

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
        """Plug-in point 1. ``x``: (B, T, d) token embeddings, ``positions`` the
        model's (T,) or (B, T) ((2, T) or (2, B, T) for grid positions) → (B, T,
        d)."""
        return x

    def transform_qk(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Plug-in point 2. ``q``: (B, H, T_q, d_h), ``k``: (B, H, T_k, d_h) → the same
        shapes. ``q_positions``: (B′, 1, T_q), ``k_positions``: (B′, 1, T_k), B′ ∈ {1,
        B} ((B′, 1, T, A) for grid positions; (T,) on a direct call)."""
        return q, k

    def score_bias(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
    ) -> torch.Tensor | None:
        """Plug-in point 3. A bias broadcastable to (B, H, T_q, T_k), added to the
        scaled scores; ``None`` for no bias. ``q``: (B, H, T_q, d_h), ``k``: (B, H,
        T_k, d_h) after :meth:`transform_qk`; ``q_positions``: (B′, 1, T_q),
        ``k_positions``: (B′, 1, T_k), B′ ∈ {1, B}, or (T,) on a direct call (a bias
        of positions alone comes out (H, T_q, T_k) for positions the batch shares,
        (B, H, T_q, T_k) for per-row ones: :func:`sequence_positions`)."""
        return None

    def value_term(
        self,
        weights: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
    ) -> torch.Tensor | None:
        """Plug-in point 4. ``weights``: (B, H, T_q, T_k) attention probabilities → a
        term (B, H, T_q, d_h) added to the attention output; ``None`` for no term.
        ``q_positions``: (B′, 1, T_q), ``k_positions``: (B′, 1, T_k), as
        :meth:`score_bias`."""
        return None

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        *,
        scale: float,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The fifth point, for the ``"attention"`` namespace only: the whole causal
        attention softmax(q·kᵀ·scale)·v, computed the method's way from *un-rotated*
        queries and keys (the method rotates them itself, case by case).

        Args:
            q: (B, H, T_q, d_h); k, v: (B, H, T_k, d_h), T_q ≤ T_k, the queries being
                the last T_q of the keys (a KV cache of un-rotated keys).
            q_positions: (1, 1, T_q); k_positions: (1, 1, T_k) (positions the batch
                shares), or (T_q,) and (T_k,) on a direct call.
            scale: the score scale (1/√d_h for the tiny LM).
            need_weights: also return the weights (B, H, T_q, T_k) from the naive
                reference path; otherwise the fast path and None.

        Returns:
            ``(out (B, H, T_q, d_h), weights or None)``.
        """
        raise NotImplementedError(f"{type(self).__name__} has no attend point")

    def score_mod(
        self,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        *,
        q: torch.Tensor | None = None,
        k: torch.Tensor | None = None,
    ):
        """FlexAttention form of the score bias (plug-in point 3 inside the kernel):
        :meth:`score_bias` added pair by pair, without any (H, T_q, T_k) tensor.
        Whatever the function looks up is built here, once per call, and is O(T) or
        O(T · something small): positions, per-distance lookups, per-offset tables.

        The attention's ``"flex"`` path asks for it when :meth:`augment_qk` gives
        None; a scheme with a score bias and neither form cannot take that path, nor
        can one with a value term (Shaw's), whose ``score_mod`` covers only the scores.

        Args:
            q_positions: (B′, 1, T_q), as for :meth:`score_bias` (or (T_q,) on a
                direct call); with B′ = B, ``b`` picks the row.
            k_positions: (B′, 1, T_k) (or (T_k,)).
            q: the queries after :meth:`transform_qk`, (B, H, T_q, d_h), for a bias
                that depends on the content (Shaw's keys, DeBERTa); ignored by a bias
                of positions alone (ALiBi, T5).
            k: the keys after :meth:`transform_qk`, (B, H, T_k, d_h), likewise.

        Returns:
            ``mod(score, b, h, q_idx, kv_idx) → score + bias[b, h, q_idx, kv_idx]``,
            ``score`` being the scaled q·k; or ``None`` (the default) for no such form.

        Raises:
            ValueError: a scheme whose bias needs ``q`` or ``k`` called without them.
        """
        return None

    def augment_qk(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The score bias folded into the dot product: ``(q_aug, k_aug)`` with

            q_aug[m] · k_aug[n] · scale = q[m] · k[n] · scale + bias[m, n],

        ``scale`` being the attention's 1/√(score_scale_factor · d_h), for a bias that
        a ``score_mod`` cannot look up from a small table (Transformer-XL's sinusoids
        of m − n). Any attention kernel then adds the bias with no T×T tensor, provided
        it is given ``scale`` explicitly (the head dim grows) and ``v`` as it was.
        ``None`` (the default) if the scheme has no such form.

        Args:
            q: (B, H, T_q, d_h) after :meth:`transform_qk`. k: (B, H, T_k, d_h).
            q_positions, k_positions: (B′, 1, T_q) and (B′, 1, T_k), as for
                :meth:`score_bias` (or (T,) on a direct call).

        Returns:
            ``(q_aug, k_aug)``: (B, H, T_q, d_aug) and (B, H, T_k, d_aug), or None.
        """
        return None

    def extra_repr(self) -> str:
        return f"name={self.name!r}, d_model={self.d_model}, num_heads={self.num_heads}"


def sequence_positions(positions: torch.Tensor) -> torch.Tensor:
    """Positions as the rows of a scheme that lays out its own head axis: (T,) or
    (B, T).

    The attention hands the plug-in points (B′, 1, T) positions, whose singleton axis
    broadcasts against the heads; a scheme that lays out its own head axis (ALiBi's
    slopes, T5's per-head table) first drops it with this function: B′ = B gives (B, T)
    and a bias (B, H, T_q, T_k); B′ = 1, a row the batch shares, gives (T,) and a bias
    (H, T_q, T_k) with no batch axis. That keeps a shared bias batch-free, the form the
    attention has always handed SDPA: a (1, H, T_q, T_k) float mask takes another
    kernel in torch 2.13's CPU SDPA, which rounds differently, so the book's numbers
    would move in their last bits. A direct call's (T,) and the model's (B, T) pass
    unchanged, for the public functions that take them
    (:func:`posenc.alibi.alibi_bias`).

    Args:
        positions: (B′, 1, T), (T,) or (B, T), integer or float.

    Returns:
        The same values, (T,) or (B, T) (a view, no copy).

    Raises:
        ValueError: any other shape (the message gives it).
    """
    if positions.dim() == 3 and positions.shape[1] == 1:  # the attention's (B′, 1, T)
        return positions[0, 0] if positions.shape[0] == 1 else positions[:, 0]
    if positions.dim() in (1, 2):
        return positions
    raise ValueError(
        f"positions must have shape (T,), (B, T) or (B′, 1, T), "
        f"got {tuple(positions.shape)}"
    )


def flex_positions(
    q_positions: torch.Tensor, k_positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions as a ``score_mod`` reads them, dtype kept.

    Args:
        q_positions: (B′, 1, T_q) (the attention's), (T_q,) or (B′, T_q).
        k_positions: likewise with T_k.

    Returns:
        ``(T_q,), (T_k,)`` when every row is alike (B′ = 1, or 1-D positions),
        indexed ``[q_idx]``, ``[kv_idx]``; else ``(B, T_q), (B, T_k)`` (a shared side
        expanded to the other's batch), indexed ``[b, q_idx]``, ``[b, kv_idx]``;
        contiguous (O(B·T) copies at most).

    Raises:
        ValueError: positions of any other shape, or batches B′ that differ and are
        not 1.
    """
    qp = sequence_positions(q_positions).reshape(-1, q_positions.shape[-1])  # (B′, T_q)
    kp = sequence_positions(k_positions).reshape(-1, k_positions.shape[-1])  # (B′, T_k)
    if qp.shape[0] == kp.shape[0] == 1:
        return qp[0].contiguous(), kp[0].contiguous()
    if qp.shape[0] not in (1, kp.shape[0]) and kp.shape[0] != 1:
        raise ValueError(
            "query and key positions must share their batch B′ (or have B′ = 1), got "
            f"{tuple(q_positions.shape)} and {tuple(k_positions.shape)}"
        )
    batch = max(qp.shape[0], kp.shape[0])  # a shared side gets the other's batch
    # contiguous: a compiled kernel is specialised to the strides of what the
    # score_mod captures, and expanded rows (stride 0) would compile one more
    return qp.expand(batch, -1).contiguous(), kp.expand(batch, -1).contiguous()


def flex_pair(qp: torch.Tensor, kp: torch.Tensor):
    """A function ``(b, q_idx, kv_idx) → (m, n)`` that reads the query and key position
    of one pair inside a ``score_mod``, from :func:`flex_positions`' result (1-D: the
    same for every ``b``; 2-D: row ``b``)."""
    if qp.dim() == 1:

        def pair(b, q_idx, kv_idx):
            return qp[q_idx], kp[kv_idx]

    else:

        def pair(b, q_idx, kv_idx):
            return qp[b, q_idx], kp[b, kv_idx]

    return pair


def register_scheme(cls=None, *, namespace: str = DEFAULT_NAMESPACE):
    """Class decorator: register a :class:`PositionalScheme` subclass under
    ``cls.name`` in ``namespace``: ``@register_scheme`` (the 1-D schemes of the
    language model), ``@register_scheme(namespace="2d")`` (the ViT's grid schemes),
    or ``@register_scheme(namespace="attention")`` (attention-level methods, which
    declare ``"attend"``).

    The class's :attr:`~PositionalScheme.position_axes` must be the namespace's
    (:data:`NAMESPACES`), so that a scheme of 2-D positions cannot join the 1-D runs.

    Raises:
        TypeError: if ``cls`` is not a PositionalScheme subclass.
        ValueError: unknown namespace; a name that is empty or already registered in
            the namespace; ``position_axes`` not the namespace's; ``"attend"``
            declared outside the ``"attention"`` namespace, or missing inside it.
    """
    _check_namespace(namespace)
    if cls is None:
        return lambda c: register_scheme(c, namespace=namespace)
    if not (isinstance(cls, type) and issubclass(cls, PositionalScheme)):
        raise TypeError(
            f"only PositionalScheme subclasses can be registered, got {cls!r}"
        )
    if not cls.name:
        raise ValueError(
            f"{cls.__name__} has an empty name; set the class attribute 'name'"
        )
    if ("attend" in cls.hooks) != (namespace == ATTEND_NAMESPACE):
        raise ValueError(
            f"{cls.__name__} declares hooks {sorted(cls.hooks)}: a scheme declares "
            f"'attend' exactly when it is registered in namespace {ATTEND_NAMESPACE!r}"
            f" (got namespace {namespace!r})"
        )
    if cls.position_axes != NAMESPACES[namespace]:
        raise ValueError(
            f"{cls.__name__}.position_axes is {cls.position_axes}; the namespace "
            f"{namespace!r} holds schemes of {NAMESPACES[namespace]}-axis positions"
        )
    registry = _REGISTRY[namespace]
    if cls.name in registry and registry[cls.name] is not cls:
        raise ValueError(
            f"a scheme named {cls.name!r} is already registered ({registry[cls.name]})"
        )
    registry[cls.name] = cls
    return cls


def _check_namespace(namespace: object) -> str:
    if not isinstance(namespace, str) or namespace not in NAMESPACES:
        raise ValueError(
            f"namespace must be one of {tuple(NAMESPACES)}, got {namespace!r}"
        )
    return namespace


def _registry(namespace: object) -> dict[str, type[PositionalScheme]]:
    """The registry of ``namespace``, filled: a lookup in ``"attention"``, whose
    methods live in :mod:`posenc.layers`, first imports the module that registers
    them. The import is lazy, inside this function, so that ``import posenc`` imports
    no layer (imports run encodings ← layers; tests/test_layout.py names this one
    exception) and every namespace answers after ``import posenc`` alone."""
    namespace = _check_namespace(namespace)
    if namespace == ATTEND_NAMESPACE:
        from .layers import remapped_schemes  # noqa: F401  (registers on import)
    return _REGISTRY[namespace]


def available_schemes(namespace: str = DEFAULT_NAMESPACE) -> tuple[str, ...]:
    """The scheme names registered in ``namespace`` (default ``"1d"``: the schemes
    the registry-wide and positions-contract tests iterate), in registration order,
    study-only schemes included (the chapters' runs and the study grid iterate
    :func:`chapter_schemes`).

    Raises:
        ValueError: unknown namespace.
    """
    return tuple(_registry(namespace))


def chapter_schemes(namespace: str = DEFAULT_NAMESPACE) -> tuple[str, ...]:
    """The registered names whose class is not :attr:`~PositionalScheme.study_only`,
    in registration order: the schemes the chapters train and list
    (:func:`posenc.experiments.book_runs`, the book's loops over schemes). Registering
    a study-only scheme leaves this list, and so every chapter's runs, unchanged.

    Raises:
        ValueError: unknown namespace.
    """
    registry = _registry(namespace)
    return tuple(name for name, cls in registry.items() if not cls.study_only)


def get_scheme_class(
    name: str, namespace: str = DEFAULT_NAMESPACE
) -> type[PositionalScheme]:
    """The class registered under ``name`` in ``namespace``.

    Raises:
        ValueError: unknown namespace; no scheme has that name there (the message
            lists the known names).
    """
    registry = _registry(namespace)
    try:
        return registry[name]
    except (KeyError, TypeError):
        known = ", ".join(map(repr, registry))
        where = "" if namespace == DEFAULT_NAMESPACE else f" in namespace {namespace!r}"
        raise ValueError(
            f"unknown positional scheme {name!r}{where}; known schemes: {known}"
        ) from None


def build_scheme(
    name: str,
    *,
    d_model: int,
    num_heads: int,
    namespace: str = DEFAULT_NAMESPACE,
    **options,
) -> PositionalScheme:
    """Build the scheme registered under ``name``.

    Args:
        name: a registered name, see :func:`available_schemes`.
        d_model: model width d.
        num_heads: number of heads H.
        namespace: ``"1d"`` (default), ``"2d"`` or ``"attention"``
            (:data:`NAMESPACES`).
        **options: the scheme's own options (e.g. ``base``, ``layout`` for
            ``"sinusoidal"``, ``max_len`` for ``"learned"``).

    Raises:
        ValueError: for an unknown name or namespace; whatever the scheme raises for
            bad options.
    """
    cls = get_scheme_class(name, namespace)
    return cls(d_model=d_model, num_heads=num_heads, **options)


@register_scheme
class NoPosition(PositionalScheme):
    """``"none"``: no positional information at all (NoPE). Attention is then
    permutation-equivariant; a causal mask alone still leaks order (Haviv et al.
    2022)."""

    name = "none"
