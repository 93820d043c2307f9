"""Context extension by remapping positions: which relative distance attention sees
between a query at position i and a key at position j (causal, j ≤ i), for three
training-free methods that keep RoPE's frequencies and change the positions instead.

* **SelfExtend** (Jin et al., ICML 2024, "LLM Maybe LongLM: Self-Extend LLM Context
  Window Without Tuning", §3, Alg. 1; code: github datamllab/LongLM,
  ``self_extend_patch/Llama.py``). Neighbour attention keeps the distance i − j while
  i − j < W; beyond it grouped attention rotates the query by ⌊i/G⌋ + W − ⌊W/G⌋ and the
  key by ⌊j/G⌋. G is ``group_size``, W ``window_size`` (the names of the authors'
  ``SelfExtend.apply``; their attention code calls them ``group_size_1`` and
  ``group_size_2``).
* **ReRoPE** (Su 2023, kexue.fm/archives/9708; code: github bojone/rerope,
  ``rerope_patch.py`` and ``leaky_rerope_patch.py``): the distance min(i − j, W); the
  leaky variant keeps i − j inside the window and W + (i − j − W)/k beyond it, k the
  ``scaling_factor``.
* **Dual Chunk Attention**, DCA (An et al., ICML 2024, "Training-Free Long-Context
  Scaling of Large Language Models", §3, Eq. 2, 5, 7, 8; code: github HKUNLP/ChunkLlama,
  ``chunkllama_attn_replace.py``): keys at j mod s; queries at i mod s in their own
  chunk (intra), at s + (i mod s) for the first w positions of a chunk and c − 1 for the
  rest when the key is in the previous chunk (successive), at c − 1 for older chunks
  (inter). s is ``chunk_size``, w ``local_window``, c ``pretraining_length``.

Each method has three functions here: ``check_*`` (the parameters, a ValueError naming
the value and the rule), ``*_positions`` (the O(T) position vectors that an efficient
attention rotates queries and keys by; no T×T tensor) and ``*_distances`` (the
(T_q, T_k) matrix of remapped distances, for a naive reference and for plots).
Attention with these positions: :mod:`posenc.layers.remapped_attention`; proofs of
the bounds: :mod:`posenc.symbolic.remap`.

Shapes: positions are 1-D integer tensors of absolute token positions, keys (T_k,),
queries (T_q,) (default: the keys' positions); distances are (T_q, T_k). Entries with
j > i (future keys) hold i − j and a case of −1: attention masks them.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._checks import check_int
from .utils import cpu_float64

#: DCA's three cases, as the integers :func:`dual_chunk_distances` returns.
DCA_CASES = {"intra": 0, "successive": 1, "inter": 2}


class RemappedPositions(NamedTuple):
    """The positions a two-band method rotates by: ``near_*`` inside the window (i − j
    < W, the ordinary RoPE positions), ``far_*`` beyond it. Each is 1-D, queries (T_q,)
    and keys (T_k,); float64 on the CPU where a position is fractional (leaky
    ReRoPE), else int64."""

    near_query: torch.Tensor
    near_key: torch.Tensor
    far_query: torch.Tensor
    far_key: torch.Tensor


class DualChunkPositions(NamedTuple):
    """DCA's position indices (An et al. 2024, Eq. 2, 5, 7): one key position P_k =
    j mod s (T_k,) and three query positions (T_q,): ``intra`` (Eq. 2), ``successive``
    (Eq. 7) and ``inter`` (Eq. 5). All int64."""

    key: torch.Tensor
    intra_query: torch.Tensor
    successive_query: torch.Tensor
    inter_query: torch.Tensor


def as_index_positions(positions: object, name: str = "positions") -> torch.Tensor:
    """``positions`` as a 1-D int64 tensor of non-negative absolute positions; an int T
    means 0..T−1. Raises TypeError for a float or non-tensor, ValueError for a tensor
    that is not 1-D or holds a negative position (floor division and chunking need
    integer positions from 0)."""
    if not isinstance(positions, torch.Tensor):
        length = check_int(f"{name} (sequence length T)", positions, minimum=0)
        return torch.arange(length)
    if positions.is_floating_point() or positions.is_complex() or (
        positions.dtype == torch.bool
    ):
        raise TypeError(
            f"{name} must be an integer tensor (token indices), got {positions.dtype}"
        )
    if positions.dim() != 1:
        raise ValueError(f"{name} must be 1-D (T,), got {tuple(positions.shape)}")
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"{name} must be >= 0, got {int(positions.min())}")
    return positions.to(torch.int64)


def _pairs(positions, query_positions):
    """The checked (query, key) positions, 1-D each; no (T_q, T_k) tensor."""
    key = as_index_positions(positions)
    query = (
        key
        if query_positions is None
        else as_index_positions(query_positions, "query_positions").to(key.device)
    )
    return query, key


# --------------------------------------------------------------------------------------
# SelfExtend
# --------------------------------------------------------------------------------------


def check_self_extend(group_size: object, window_size: object) -> tuple[int, int]:
    """SelfExtend's group size G ≥ 1 and neighbour window W ≥ 1, as ints.

    The authors' code requires neither W ≥ G nor G | W; with G ∤ W their prefill code
    shifts the grouped query by W − W/G (true division, a fractional position) and
    their decoding code by W − ⌊W/G⌋; this module uses ⌊W/G⌋ throughout, so the two
    agree exactly when G divides W (see :func:`self_extend_positions`)."""
    group_size = check_int("group_size (G)", group_size, minimum=1)
    window_size = check_int("window_size (W)", window_size, minimum=1)
    return group_size, window_size


def self_extend_positions(
    positions: object,
    *,
    group_size: int,
    window_size: int,
    query_positions: object = None,
) -> RemappedPositions:
    """SelfExtend's positions (Jin et al. 2024, §3, Alg. 1): near = the positions
    themselves; far (grouped) query ⌊i/G⌋ + W − ⌊W/G⌋, far key ⌊j/G⌋.

    The grouped distance ⌊i/G⌋ − ⌊j/G⌋ + W − ⌊W/G⌋ is ≥ W whenever i − j ≥ W, so the
    grouped band continues the neighbour band without overlap.

    Args:
        positions: keys' absolute positions (T_k,) int, or an int T for 0..T−1.
        group_size: G ≥ 1. window_size: W ≥ 1.
        query_positions: (T_q,) int; default the keys' positions.

    Returns:
        :class:`RemappedPositions`, int64.

    Raises:
        TypeError, ValueError: as :func:`check_self_extend` and
            :func:`as_index_positions`.
    """
    group, window = check_self_extend(group_size, window_size)
    query, key = _pairs(positions, query_positions)
    shift = window - window // group
    return RemappedPositions(query, key, query // group + shift, key // group)


def self_extend_distances(
    positions: object,
    *,
    group_size: int,
    window_size: int,
    query_positions: object = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The relative distance SelfExtend lets each pair see (Jin et al. 2024, §3):
    i − j when i − j < W, else ⌊i/G⌋ + W − ⌊W/G⌋ − ⌊j/G⌋.

    Args: as :func:`self_extend_positions`.

    Returns:
        ``(distance, grouped)``: int64 (T_q, T_k) and bool (T_q, T_k), True where the
        pair is in grouped attention (i − j ≥ W).
    """
    near_q, near_k, far_q, far_k = self_extend_positions(
        positions,
        group_size=group_size,
        window_size=window_size,
        query_positions=query_positions,
    )
    offset = near_q[:, None] - near_k[None, :]
    grouped = offset >= window_size
    distance = torch.where(grouped, far_q[:, None] - far_k[None, :], offset)
    return distance, grouped


def self_extend_max_distance(seq_len: int, *, group_size: int, window_size: int) -> int:
    """The largest distance SelfExtend produces on T tokens at positions 0..T−1:
    ⌊(T−1)/G⌋ + W − ⌊W/G⌋ when T > W (a grouped pair exists), else T − 1.
    :func:`posenc.symbolic.remap.self_extend_bound` proves it."""
    group, window = check_self_extend(group_size, window_size)
    seq_len = check_int("seq_len (T)", seq_len, minimum=1)
    if seq_len <= window:
        return seq_len - 1
    return (seq_len - 1) // group + window - window // group


def self_extend_max_length(
    trained_length: int, *, group_size: int, window_size: int
) -> int:
    """The longest input whose SelfExtend distances all stay below the trained length
    L (every distance ≤ L − 1): G·(L − W + ⌊W/G⌋), which is the paper's and README's
    (L − W)·G + W exactly when G divides W, and W mod G tokens less otherwise.

    Raises:
        ValueError: W ≥ L (the neighbour band alone would reach L).
    """
    group, window = check_self_extend(group_size, window_size)
    length = check_int("trained_length (L)", trained_length, minimum=1)
    if window >= length:
        raise ValueError(
            f"window_size (W) must be < trained_length (L), got W={window}, L={length}"
        )
    return group * (length - window + window // group)


# --------------------------------------------------------------------------------------
# ReRoPE and leaky ReRoPE
# --------------------------------------------------------------------------------------


def check_rerope(window: object, scaling_factor: object = None) -> tuple[int, float]:
    """ReRoPE's window W ≥ 1 (bojone's ``window``) and leaky ReRoPE's k > 1 (his
    ``scaling_factor``; None means plain ReRoPE, the limit k → ∞). Returns ``(W,
    k)`` with k = inf for plain ReRoPE."""
    window = check_int("window (W)", window, minimum=1)
    if scaling_factor is None:
        return window, float("inf")
    if isinstance(scaling_factor, bool) or not isinstance(scaling_factor, (int, float)):
        raise TypeError(
            f"scaling_factor (k) must be a number or None, got {scaling_factor!r}"
        )
    if not 1.0 < float(scaling_factor) < float("inf"):
        raise ValueError(
            "scaling_factor (k) must be finite and > 1 (leaky ReRoPE compresses "
            f"distances beyond the window by 1/k), got {scaling_factor}"
        )
    return window, float(scaling_factor)


def rerope_positions(
    positions: object,
    *,
    window: int,
    scaling_factor: float | None = None,
    query_positions: object = None,
) -> RemappedPositions:
    """ReRoPE's positions (Su 2023; bojone/rerope): near = the positions; far query at
    W and far key at 0 (an un-rotated key), so that every far pair sees distance W
    (``rerope_patch.py``, ``forward_with_rerope``: ``position_ids * 0 + window`` for
    the query, the key without RoPE). Leaky (``leaky_rerope_patch.py``,
    ``forward_with_leaky_rerope``): far query (i + W(k − 1))/k, far key j/k — RoPE
    with positions divided by k and the query shifted by ``offset = window *
    (scaling_factor - 1)`` — so the far distance is W + (i − j − W)/k.

    Args:
        positions: keys' positions (T_k,) int or an int T. window: W ≥ 1.
        scaling_factor: k > 1 for leaky ReRoPE, None for ReRoPE.
        query_positions: (T_q,) int; default the keys' positions.

    Returns:
        :class:`RemappedPositions`: int64 for ReRoPE; for leaky the far ones are
        float64 on the CPU (float64 does not exist on every device).
    """
    window, k = check_rerope(window, scaling_factor)
    query, key = _pairs(positions, query_positions)
    if scaling_factor is None:
        return RemappedPositions(
            query, key, torch.full_like(query, window), torch.zeros_like(key)
        )
    far_query = (cpu_float64(query) + window * (k - 1.0)) / k
    return RemappedPositions(query, key, far_query, cpu_float64(key) / k)


def rerope_distances(
    positions: object,
    *,
    window: int,
    scaling_factor: float | None = None,
    query_positions: object = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReRoPE's distance min(i − j, W), or leaky ReRoPE's i − j for i − j < W and W +
    (i − j − W)/k beyond (Su 2023, kexue.fm/archives/9708; the mask ``(i −
    j).abs() < window`` of bojone's patches picks the near scores).

    Returns:
        ``(distance, far)``: float64 (T_q, T_k) on the CPU and bool (T_q, T_k), True
        where i − j ≥ W.
    """
    near_q, near_k, far_q, far_k = rerope_positions(
        positions,
        window=window,
        scaling_factor=scaling_factor,
        query_positions=query_positions,
    )
    offset = cpu_float64(near_q[:, None] - near_k[None, :])
    far = offset >= window
    far_distance = cpu_float64(far_q)[:, None] - cpu_float64(far_k)[None, :]
    return torch.where(far, far_distance, offset), far


# --------------------------------------------------------------------------------------
# Dual Chunk Attention
# --------------------------------------------------------------------------------------


def check_dual_chunk(
    chunk_size: object, local_window: object, pretraining_length: object
) -> tuple[int, int, int]:
    """DCA's chunk size s, local window w and pretraining length c (An et al. 2024,
    §3): 1 ≤ s < c (Eq. 5 needs c − 1 > max P_k = s − 1) and 0 ≤ w ≤ c − s (Eq. 7's
    s + w − 1 must not exceed c − 1); ``local_window=None`` means the paper's choice w
    = c − s. Returns ``(s, w, c)``."""
    chunk = check_int("chunk_size (s)", chunk_size, minimum=1)
    length = check_int("pretraining_length (c)", pretraining_length, minimum=2)
    if chunk >= length:
        raise ValueError(
            "chunk_size (s) must be < pretraining_length (c) so that the inter-chunk "
            f"query position c − 1 exceeds every key position; got s={chunk}, "
            f"c={length}"
        )
    if local_window is None:
        return chunk, length - chunk, length
    window = check_int("local_window (w)", local_window, minimum=0)
    if window > length - chunk:
        raise ValueError(
            "local_window (w) must be <= pretraining_length − chunk_size (c − s), so "
            f"that s + w − 1 <= c − 1; got w={window}, c − s={length - chunk}"
        )
    return chunk, window, length


def dual_chunk_positions(
    positions: object,
    *,
    chunk_size: int,
    pretraining_length: int,
    local_window: int | None = None,
    query_positions: object = None,
) -> DualChunkPositions:
    """DCA's position indices (An et al. 2024): P_k = P_q^Intra = j mod s (Eq. 2);
    P_q^Succ = s + (i mod s) for i mod s < w, else c − 1 (Eq. 7); P_q^Inter = c − 1
    (Eq. 5). Keys are rotated once, by j mod s, whichever query they meet.

    Args:
        positions: keys' positions (T_k,) int or an int T.
        chunk_size: s. pretraining_length: c. local_window: w (default c − s).
        query_positions: (T_q,) int; default the keys' positions.

    Returns:
        :class:`DualChunkPositions`, int64.
    """
    s, w, c = check_dual_chunk(chunk_size, local_window, pretraining_length)
    query, key = _pairs(positions, query_positions)
    inner = query % s
    successive = torch.where(inner < w, s + inner, torch.full_like(inner, c - 1))
    return DualChunkPositions(key % s, inner, successive, torch.full_like(inner, c - 1))


def dual_chunk_distances(
    positions: object,
    *,
    chunk_size: int,
    pretraining_length: int,
    local_window: int | None = None,
    query_positions: object = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DCA's relative distance matrix M (An et al. 2024, Eq. 8): P_q^Intra[i] − P_k[j]
    when ⌊i/s⌋ = ⌊j/s⌋, P_q^Succ[i] − P_k[j] when ⌊i/s⌋ − ⌊j/s⌋ = 1, P_q^Inter[i] −
    P_k[j] when ⌊i/s⌋ − ⌊j/s⌋ > 1.

    Args: as :func:`dual_chunk_positions`.

    Returns:
        ``(distance, case)``: int64 (T_q, T_k) and int64 (T_q, T_k) with the case of
        each pair, :data:`DCA_CASES` (0 intra, 1 successive, 2 inter), −1 for j > i.
    """
    s = check_dual_chunk(chunk_size, local_window, pretraining_length)[0]
    pos = dual_chunk_positions(
        positions,
        chunk_size=chunk_size,
        pretraining_length=pretraining_length,
        local_window=local_window,
        query_positions=query_positions,
    )
    query, key = _pairs(positions, query_positions)
    offset = query[:, None] - key[None, :]
    apart = query[:, None] // s - key[None, :] // s
    case = apart.clamp(max=2)
    case = torch.where(offset < 0, torch.full_like(case, -1), case)
    query_position = torch.where(
        case == 0,
        pos.intra_query[:, None],
        torch.where(case == 1, pos.successive_query[:, None], pos.inter_query[:, None]),
    )
    distance = torch.where(offset < 0, offset, query_position - pos.key[None, :])
    return distance, case
