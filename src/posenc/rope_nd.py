"""RoPE on more than one position axis: Qwen2-VL's multimodal RoPE (M-RoPE; Wang et al.
2024, "Qwen2-VL", §2.1) and the 2-D axial RoPE of vision transformers (Heo et al. 2024,
"Rotary Position Embedding for Vision Transformer", §3).

Each pair of features is assigned to one axis (time, height, width; or x, y) and
rotated by that axis's position, so one query/key carries several coordinates. The
1-D core is :mod:`posenc.rope`.

Shapes:
    B batch, H heads, T tokens, d_h head width, r rotated width; axis positions are
    (A, T) or (A, B, T) for A axes at the public functions, and (B′, 1, T, A), B′ ∈
    {1, B}, inside the attention (:func:`axis_positions_to_heads`).
"""

from __future__ import annotations

import torch

from ._checks import check_base, check_choice, check_even_dim, check_int
from .frequencies import DEFAULT_BASE, compute_inv_freq
from .rope import ROPE_LAYOUTS, rotate_half, rotate_interleaved


MROPE_AXES = ("temporal", "height", "width")


ROPE_2D_FREQUENCIES = ("shared", "alternating")


def _check_x_4d(x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(
            f"x must be a floating tensor, got {getattr(x, 'dtype', type(x))}"
        )
    if x.dim() != 4:
        raise ValueError(f"x must have shape (B, H, T, head_dim), got {tuple(x.shape)}")
    return x


def check_axis_positions(
    positions: object, num_axes: int, seq_len: int, batch: int, axes: str
) -> torch.Tensor:
    """Validate positions (A, T) or (A, B, T) of A axes (M-RoPE's (temporal, height,
    width), 2-D RoPE's and the ViT's (row, column)) and return them unchanged.

    Raises:
        TypeError: positions not an integer or float tensor.
        ValueError: another shape (the message names A, T and B), or non-finite ids.
    """
    if (
        not isinstance(positions, torch.Tensor)
        or positions.is_complex()
        or positions.dtype == torch.bool
    ):
        raise TypeError(
            "positions must be an integer or float tensor, got "
            f"{getattr(positions, 'dtype', type(positions))}"
        )
    shape = tuple(positions.shape)
    if (
        positions.dim() not in (2, 3)
        or shape[0] != num_axes
        or shape[-1] != seq_len
        or (positions.dim() == 3 and shape[1] not in (1, batch))
    ):
        raise ValueError(
            f"positions must have shape ({num_axes}, T) or ({num_axes}, B, T), one row "
            f"of ids per axis ({axes}), with T={seq_len} and B={batch}; got {shape}"
        )
    if positions.is_floating_point() and not torch.isfinite(positions).all():
        raise ValueError("positions must be finite, got a tensor with inf or nan")
    return positions


def axis_positions_to_heads(positions: torch.Tensor) -> torch.Tensor:
    """Checked axis positions (A, T) or (A, B, T) (:func:`check_axis_positions`) as
    (B′, 1, T, A), B′ = 1 or B: indexed by the axis of each pair on the last axis and
    broadcasting against x (B, H, T, d_h). The shape grid positions have inside
    :class:`~posenc.layers.attention.MultiHeadAttention`. A view, no copy."""
    if positions.dim() == 2:  # (A, T) → (A, 1, T): one row shared by the batch
        positions = positions[:, None]
    return positions.movedim(0, -1)[:, None]  # (A, B′, T) → (B′, 1, T, A)


def _axis_positions(
    positions: object, num_axes: int, x: torch.Tensor, axes: str
) -> torch.Tensor:
    """Positions (A, T) or (A, B, T) checked against x (B, H, T, d_h), as (B′, 1, T,
    A) (:func:`axis_positions_to_heads`)."""
    batch, _, seq_len, _ = x.shape
    positions = check_axis_positions(positions, num_axes, seq_len, batch, axes)
    return axis_positions_to_heads(positions)


def _rotate_by_pair_angles(
    x: torch.Tensor, angles: torch.Tensor, layout: str
) -> torch.Tensor:
    """Rotate every feature pair of x (..., d) by its own angle, angles (..., d/2)
    float32: ``x⊙cos + rotate(x)⊙sin`` with cos and sin cast to x's dtype."""
    if layout == "half":
        angles = torch.cat((angles, angles), dim=-1)
    else:
        angles = angles.repeat_interleave(2, dim=-1)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    rotate = rotate_half if layout == "half" else rotate_interleaved
    return x * cos + rotate(x) * sin


def mrope_axis_of_pair(
    mrope_section, head_dim: int, *, mrope_interleaved: bool = False
) -> list[int]:
    """Which position axis (0 temporal, 1 height, 2 width) each rotary pair of M-RoPE
    reads.

    Chunked (Qwen2-VL, Qwen2.5-VL): the first ``mrope_section[0]`` pairs read the
    temporal id, the next ``mrope_section[1]`` the height, the last ``mrope_section[2]``
    the width. Interleaved (Qwen3-VL): pair i reads the height if i ≡ 1 (mod 3) and i <
    3·``mrope_section[1]``, the width if i ≡ 2 (mod 3) and i < 3·``mrope_section[2]``,
    the temporal id otherwise, so every axis gets high and low frequencies (with
    [24, 20, 20] of Qwen3-VL: 20 pairs each for height and width, 24 temporal).

    Args:
        mrope_section: three positive ints, pairs per axis, summing to head_dim / 2.
        head_dim: d_h (even).
        mrope_interleaved: Qwen3-VL's interleaved assignment instead of chunks.

    Returns:
        A list of head_dim / 2 axis indices.

    Raises:
        TypeError: if the sections are not integers.
        ValueError: odd head_dim; not three sections; a section < 1; a sum ≠ d_h / 2.
    """
    head_dim = check_even_dim("head_dim", head_dim)
    try:
        sections = list(mrope_section)
    except TypeError:
        raise TypeError(
            "mrope_section must be a sequence of 3 ints (pairs per temporal, height, "
            f"width axis), got {mrope_section!r}"
        ) from None
    if len(sections) != 3:
        raise ValueError(
            "mrope_section must hold 3 ints (pairs per temporal, height, width axis), "
            f"got {len(sections)}: {mrope_section!r}"
        )
    sections = [
        check_int(f"mrope_section[{i}]", s, minimum=1) for i, s in enumerate(sections)
    ]
    if sum(sections) != head_dim // 2:
        raise ValueError(
            f"mrope_section must sum to head_dim / 2 = {head_dim // 2} (one entry per "
            f"rotary pair), got {sections} with sum {sum(sections)}"
        )
    if not mrope_interleaved:
        return [axis for axis, size in enumerate(sections) for _ in range(size)]
    return [
        i % 3 if i % 3 in (1, 2) and i < 3 * sections[i % 3] else 0
        for i in range(head_dim // 2)
    ]


def apply_mrope(
    x: torch.Tensor,
    positions: torch.Tensor,
    mrope_section,
    *,
    base: float = DEFAULT_BASE,
    mrope_interleaved: bool = False,
) -> torch.Tensor:
    """Multimodal rotary position embedding, M-RoPE (Qwen2-VL, §2.1): RoPE whose rotary
    pairs are split into three groups that rotate with the temporal, height and width
    id of the token.

    Pair i (features (i, i + d_h/2), ``"half"`` layout) is rotated by the angle
    ``p_{a(i)}·θ_i``, with θ_i = b^(−2i/d_h) over the whole head as in 1-D RoPE and
    a(i) the axis whose section holds pair i (:func:`mrope_axis_of_pair`): with
    ``mrope_section = [16, 24, 24]`` and d_h = 128, pairs 0–15 (the highest
    frequencies) follow the temporal id, pairs 16–39 the height, pairs 40–63 the width.
    A text token has equal ids (m, m, m), so every pair turns by m·θ_i and M-RoPE
    is 1-D RoPE (proved in :func:`posenc.symbolic.mrope_text_reduction`); between two
    image patches the score depends only on the differences of the ids
    (:func:`posenc.symbolic.mrope_relative_score`). Angles are formed in float32;
    cos and sin are cast to x's dtype, as in Hugging Face's Qwen2-VL.

    Args:
        x: (B, H, T, d_h) float queries or keys.
        positions: (3, T) or (3, B, T) integer (or float) ids, rows (temporal,
            height, width), e.g. from :func:`mrope_positions`; (3, B, T) gives each
            sequence of the batch its own ids.
        mrope_section: three ints, the pairs per axis, summing to d_h / 2 (Qwen2-VL's
            ``rope_parameters["mrope_section"]``, [16, 24, 24] for d_h = 128).
        base: frequency base b (``rope_theta``), default ``DEFAULT_BASE`` (10000);
            1000000 in Qwen2-VL.
        mrope_interleaved: Qwen3-VL's interleaved axis assignment instead of chunks.

    Returns:
        A tensor of x's shape, dtype and device.

    Raises:
        TypeError: if x is not a floating tensor, positions not a real tensor, or a
            section not an int.
        ValueError: x not 4-D or with odd d_h; positions not (3, T) or (3, B, T)
            matching x; non-finite positions; mrope_section not three positive ints
            summing to d_h / 2; base not finite and > 0.

    Source: Wang et al. 2024, "Qwen2-VL: Enhancing Vision-Language Model's Perception
    of the World at Any Resolution", arXiv:2409.12191, §2.1 "Multimodal Rotary
    Position Embedding (M-RoPE)"; Hugging Face ``Qwen2VLRotaryEmbedding`` (chunked)
    and ``Qwen3VLTextRotaryEmbedding`` (interleaved); RoPE: Su et al. 2021, RoFormer,
    §3.4.2, Eq. 34.
    """
    x = _check_x_4d(x)
    head_dim = check_even_dim("head_dim", x.shape[-1])
    axis = mrope_axis_of_pair(
        mrope_section, head_dim, mrope_interleaved=mrope_interleaved
    )
    positions = _axis_positions(positions, 3, x, "temporal, height, width")
    inv_freq = compute_inv_freq(head_dim, check_base(base), device=x.device)
    ids = positions.to(device=x.device, dtype=torch.float32)[
        ..., torch.tensor(axis, device=x.device)
    ]  # (B or 1, 1, T, d_h/2): the id each pair reads
    return _rotate_by_pair_angles(x, ids * inv_freq, "half")


def rope_2d_inv_freq(
    head_dim: int, base: float = DEFAULT_BASE, *, frequencies: str = "shared"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The frequencies of 2-D axial RoPE: d_h/4 for the row, d_h/4 for the column.

    ``"shared"``: both axes use θ_j = b^(−4j/d_h), j = 0 … d_h/4 − 1 — the 1-D RoPE
    frequencies of a head of width d_h/2 (Heo et al. 2024 RoPE-Axial; Qwen2-VL's
    vision encoder). ``"alternating"``: the row takes the even-indexed 1-D
    frequencies b^(−2(2j)/d_h) and the column the odd-indexed b^(−2(2j+1)/d_h)
    (Pixtral), so the two axes together cover every frequency of 1-D RoPE.

    Returns:
        ``(row, column)``, float32, each (d_h/4,).

    Raises:
        ValueError: head_dim not a positive multiple of 4; unknown ``frequencies``;
            base not finite and > 0.
    """
    head_dim = check_even_dim("head_dim", head_dim)
    if head_dim % 4:
        raise ValueError(
            "head_dim must be a multiple of 4 for 2-D RoPE (half of the pairs per "
            f"axis), got {head_dim}"
        )
    frequencies = check_choice("frequencies", frequencies, ROPE_2D_FREQUENCIES)
    base = check_base(base)
    if frequencies == "shared":
        inv_freq = compute_inv_freq(head_dim // 2, base)
        return inv_freq, inv_freq.clone()
    inv_freq = compute_inv_freq(head_dim, base)
    return inv_freq[0::2].contiguous(), inv_freq[1::2].contiguous()


def apply_rope_2d(
    x: torch.Tensor,
    positions: torch.Tensor,
    *,
    base: float = DEFAULT_BASE,
    layout: str = "half",
    frequencies: str = "shared",
) -> torch.Tensor:
    """2-D axial RoPE for image patches (ViT style, no temporal axis): the first half
    of the rotary pairs rotates with the patch's row, the second half with its column.

    Pair i < d_h/4 turns by ``row·θ^row_i``, pair d_h/4 + j by ``column·θ^col_j``
    (:func:`rope_2d_inv_freq`), so the score between two patches is a sum of a 1-D
    RoPE score over the row offset and one over the column offset: it depends only on
    (Δrow, Δcolumn), and along one row it is 1-D RoPE of width d_h/2 on the column
    pairs. With the defaults (``"half"`` layout, row first, shared frequencies) this
    is exactly Hugging Face's ``Qwen2VLVisionRotaryEmbedding`` (Qwen2-VL and
    Qwen2.5-VL vision encoders); ``frequencies="alternating"`` is
    ``PixtralRotaryEmbedding``. Heo et al.'s reference code (naver-ai/rope-vit,
    ``compute_axial_cis``, base 100) uses the ``"interleaved"`` layout with the
    column (x) first: pass ``positions.flip(0)`` to get it.

    Args:
        x: (B, H, T, d_h) float, d_h a multiple of 4.
        positions: (2, T) or (2, B, T) integer (or float) ids, rows (row, column).
        base: frequency base b, default ``DEFAULT_BASE`` (10000, as Qwen2-VL's and
            Pixtral's encoders).
        layout: ``"half"`` (pairs (i, i + d_h/2)) or ``"interleaved"`` (pairs (2i,
            2i + 1)).
        frequencies: ``"shared"`` or ``"alternating"`` (see :func:`rope_2d_inv_freq`).

    Returns:
        A tensor of x's shape, dtype and device.

    Raises:
        TypeError: if x is not a floating tensor or positions not a real tensor.
        ValueError: x not 4-D or d_h not a multiple of 4; positions not (2, T) or
            (2, B, T) matching x; non-finite positions; unknown layout or
            frequencies; base not finite and > 0.

    Source: Heo et al. 2024, "Rotary Position Embedding for Vision Transformer"
    (ECCV 2024, arXiv:2403.13298), §3, RoPE-Axial ("axial frequency"); Wang et
    al. 2024, Qwen2-VL, arXiv:2409.12191, §2.1 (2D-RoPE in the ViT); RoFormer, Su et
    al. 2021, §3.4.2.
    """
    x = _check_x_4d(x)
    positions = _axis_positions(positions, 2, x, "row, column")
    return rope_2d_rotate(
        x, positions, base=base, layout=layout, frequencies=frequencies
    )


def rope_2d_rotate(
    x: torch.Tensor,
    positions: torch.Tensor,
    *,
    base: float = DEFAULT_BASE,
    layout: str = "half",
    frequencies: str = "shared",
) -> torch.Tensor:
    """:func:`apply_rope_2d` on positions in the attention's inside shape: the
    rotation of :class:`posenc.schemes_2d.Rope2D`'s plug-in point.

    Args:
        x: (B, H, T, d_h) float, d_h a multiple of 4.
        positions: (B′, 1, T, 2), B′ ∈ {1, B}, (row, column) on the last axis
            (:func:`axis_positions_to_heads`), integer or float, finite.
        base, layout, frequencies: as :func:`apply_rope_2d`.

    Returns:
        A tensor of x's shape, dtype and device.

    Raises:
        ValueError: positions not (B′, 1, T, 2) matching x; d_h not a multiple of 4;
            unknown layout or frequencies; base not finite and > 0.

    Source: as :func:`apply_rope_2d`.
    """
    batch, _, seq_len, _ = x.shape
    if (
        positions.dim() != 4
        or positions.shape[0] not in (1, batch)
        or positions.shape[1:] != (1, seq_len, 2)
    ):
        raise ValueError(
            f"positions must have shape (B′, 1, T, 2) with B′ = 1 or {batch} and "
            f"T={seq_len}, got {tuple(positions.shape)}"
        )
    layout = check_choice("layout", layout, ROPE_LAYOUTS)
    row_freq, col_freq = rope_2d_inv_freq(x.shape[-1], base, frequencies=frequencies)
    ids = positions.to(device=x.device, dtype=torch.float32)
    quarter = row_freq.numel()
    axis = torch.tensor([0] * quarter + [1] * quarter, device=x.device)
    inv_freq = torch.cat((row_freq, col_freq)).to(x.device)
    return _rotate_by_pair_angles(x, ids[..., axis] * inv_freq, layout)


def mrope_positions(segments, *, device: torch.device | str | None = None):
    """Qwen2-VL's (temporal, height, width) ids for a sequence of text runs and
    vision grids.

    A text run of n tokens gets ids s, s+1, …, s+n−1 on all three axes; a vision
    grid of t × h × w tokens (in the order t, then rows, then columns) gets the ids
    (s + τ, s + row, s + column). The next segment starts at s' = (largest id so
    far) + 1: Qwen2-VL §2.1 starts each modality's ids one past the largest id of the
    one before. For images (t = 1) and videos with
    t ≤ max(h, w) this is Hugging Face's ``Qwen2VLModel.get_rope_index``; version
    5.23 advances by max(h, w) only, so for longer videos its ids of the following
    text overlap the video's temporal ids.

    Args:
        segments: a sequence whose items are an int n ≥ 1 (a text run) or a triple
            (t, h, w) of positive ints (a vision grid in language-model tokens, i.e.
            after the 2 × 2 spatial merge).
        device: where to create the ids.

    Returns:
        int64 tensor (3, T), T the total number of tokens, rows (temporal, height,
        width), for :func:`apply_mrope`.

    Raises:
        TypeError: a segment neither an int nor a triple of ints.
        ValueError: a run or a grid size < 1; no segments.

    Source: Wang et al. 2024, Qwen2-VL, arXiv:2409.12191, §2.1 and Figure 3.
    """
    parts, start = [], 0
    for k, segment in enumerate(segments):
        if isinstance(segment, (tuple, list)):
            if len(segment) != 3:
                raise ValueError(
                    f"segments[{k}] must be a (t, h, w) vision grid, got {segment!r}"
                )
            t, h, w = (
                check_int(f"segments[{k}][{i}]", s, minimum=1)
                for i, s in enumerate(segment)
            )
            grid = torch.meshgrid(
                torch.arange(t, device=device),
                torch.arange(h, device=device),
                torch.arange(w, device=device),
                indexing="ij",
            )
            parts.append(torch.stack(grid).reshape(3, -1) + start)
            start += max(t, h, w)
        else:
            n = check_int(f"segments[{k}] (a text run)", segment, minimum=1)
            parts.append(torch.arange(start, start + n, device=device).expand(3, -1))
            start += n
    if not parts:
        raise ValueError("segments must hold at least one text run or vision grid")
    return torch.cat(parts, dim=1)


def mrope_next_positions(positions: torch.Tensor, num_new: int = 1) -> torch.Tensor:
    """The (temporal, height, width) ids of ``num_new`` text tokens that continue a
    sequence whose ids are ``positions``, as generation appends them.

    A text token after the sequence takes id (largest id so far) + 1 on all three
    axes, not the token count T: a vision grid of t × h × w tokens advances the ids by
    max(t, h, w) only, so after an image the ids run behind the count. Qwen2-VL keeps
    the gap as ``rope_deltas`` = (largest id + 1) − T and decodes step k (0-based,
    k = 0 the first new token) at T + k + ``rope_deltas`` (transformers 5.23,
    ``Qwen2VLModel.get_rope_index`` and ``compute_3d_position_ids``); the result is
    the same ids.

    Args:
        positions: (3, T) or (3, B, T) ids of the sequence so far (e.g. from
            :func:`mrope_positions`), integer.
        num_new: the number of new text tokens, ≥ 1.

    Returns:
        int64 (3, num_new) or (3, B, num_new): ``max + 1, max + 2, …`` on every axis,
        max taken per row of the batch.

    Raises:
        ValueError: positions not (3, T) or (3, B, T) integer ids; num_new < 1.

    Source: Wang et al. 2024, Qwen2-VL, arXiv:2409.12191, §2.1.
    """
    num_new = check_int("num_new", num_new, minimum=1)
    if (
        not isinstance(positions, torch.Tensor)
        or positions.is_floating_point()
        or positions.is_complex()
        or positions.dim() not in (2, 3)
        or positions.shape[0] != 3
        or positions.shape[-1] < 1
    ):
        raise ValueError(
            "positions must be integer ids of shape (3, T) or (3, B, T), got "
            f"{getattr(positions, 'dtype', type(positions))} of shape "
            f"{tuple(getattr(positions, 'shape', ()))}"
        )
    start = positions.amax(dim=(0, -1)) + 1  # () or (B,)
    steps = torch.arange(num_new, device=positions.device)
    return (start[..., None] + steps).expand(3, *start.shape, num_new).long()
