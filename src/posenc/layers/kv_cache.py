"""KV caches for incremental decoding: the keys and values one attention layer has seen,
with their positions (:class:`LayerKVCache`), and a streaming cache that keeps the
first tokens and a window of recent ones, re-assigning their positions at every step
(:class:`StreamingLayerKVCache`; Xiao et al. 2024, "Efficient Streaming Language
Models with Attention Sinks", §3.2). Read by :class:`posenc.layers.attention.
MultiHeadAttention`.

Shapes:
    B batch, H heads, T_new new tokens, T_k kept keys, d_h head width; positions are
    the attention's (B′, 1, T) (or (B′, 1, T, A) for A grid axes), B′ ∈ {1, B}: T is
    axis 2 in both, where the cache appends.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from .._checks import check_int


class LayerKVCache:
    """The keys and values that one attention layer has seen, with their positions.

    Keys are stored *after* the scheme's query/key transform (rotated, for RoPE), so a
    decoding step transforms only its own new keys. Grows by concatenation; for teaching
    and tests, not for serving (no preallocation, no paging).
    """

    #: How the cache holds positions, read by :class:`MultiHeadAttention`: False here
    #: (keys are stored transformed, at their own positions); True for a cache that
    #: gives every kept key a new position at each step
    #: (:class:`StreamingLayerKVCache`), whose keys are stored untransformed.
    reassigns_positions: ClassVar[bool] = False

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
        """Add new keys/values (B, H, T_new, d_h) at ``positions`` (B′, 1, T_new) (or
        (B′, 1, T_new, A)) and return all of them: ``(k, v, positions)`` with T_k =
        cached + new.

        Raises:
            ValueError: positions whose B′ or grid axes differ from the cached ones'
            (a step must pass positions shared by the batch, or per row, as the first
            did).
        """
        if self.k is None:
            self.k, self.v, self.positions = k, v, positions
        else:
            cached = self.positions.shape
            if positions.shape[:2] != cached[:2] or positions.shape[3:] != cached[3:]:
                raise ValueError(
                    "positions of a cached step must keep the batch and axes of the "
                    f"cached ones (B′, 1, T[, A]): cached {tuple(cached)}, new "
                    f"{tuple(positions.shape)}"
                )
            self.k = torch.cat((self.k, k), dim=-2)
            self.v = torch.cat((self.v, v), dim=-2)
            self.positions = torch.cat((self.positions, positions), dim=2)
        return self.k, self.v, self.positions


class KVCache:
    """One :class:`LayerKVCache` per layer of a model, for incremental decoding.

    ``len(cache)`` is the number of tokens seen; :meth:`next_positions` gives the
    default positions of the next ``T`` tokens, ``len(cache) … len(cache) + T − 1``:
    positions are explicit offsets.
    """

    def __init__(self, num_layers: int) -> None:
        self.layers = [
            LayerKVCache()
            for _ in range(check_int("num_layers", num_layers, minimum=1))
        ]

    def __len__(self) -> int:
        return len(self.layers[0])

    def next_positions(
        self, seq_len: int, *, device: torch.device | str | None = None
    ) -> torch.Tensor:
        start = len(self)
        return torch.arange(start, start + seq_len, device=device)


class StreamingLayerKVCache(LayerKVCache):
    """One layer's cache for StreamingLLM (Xiao et al. 2024, "Efficient Streaming
    Language Models with Attention Sinks", §3.2): it keeps the first ``sink_tokens``
    keys (the attention sinks) and the last ``window`` keys, at most
    ``sink_tokens + window`` in all, and evicts the ones between.

    Positions are *slots in the cache*, not positions in the text: the keys are stored
    **before** the scheme's transform, and every step transforms all of them again at
    their current slots ``0 … len − 1`` (for RoPE: the cached keys are re-rotated), as
    StreamingLLM does, so that no distance ever exceeds the cache's size. A scheme that
    acts on the embeddings (sinusoidal, learned) cannot be re-positioned this way.
    """

    reassigns_positions = True

    def __init__(self, sink_tokens: int, window: int) -> None:
        super().__init__()
        self.sink_tokens = check_int("sink_tokens", sink_tokens, minimum=0)
        self.window = check_int("window", window, minimum=1)
        self.seen = 0

    @property
    def capacity(self) -> int:
        return self.sink_tokens + self.window

    def next_slots(self, seq_len: int) -> range:
        """The slots the next ``seq_len`` tokens will take (see :meth:`append`)."""
        stored = len(self)
        if stored + seq_len <= self.capacity:
            return range(stored, stored + seq_len)
        if seq_len != 1:
            raise ValueError(
                f"a full streaming cache ({stored} of {self.capacity} slots) takes one "
                f"token per step, got {seq_len}"
            )
        return range(self.capacity - 1, self.capacity)

    def append(self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
        """Add untransformed keys and values (B, H, T_new, d_h); evict past the
        capacity; return ``(k, v, slots)`` with slots ``0 … T_k − 1``.

        Args:
            k, v: (B, H, T_new, d_h), untransformed.
            positions: (1, 1, T_new), the slots of :meth:`next_slots`, shared by the
                batch.

        Returns:
            ``(k, v, slots)``: k, v (B, H, T_k, d_h); slots (1, 1, T_k).

        Raises:
            ValueError: ``positions`` not shared by the batch or not the slots of
            :meth:`next_slots` (absolute positions would be silently wrong here).
        """
        slots = self.next_slots(k.shape[-2])
        expected = torch.arange(slots.start, slots.stop, device=positions.device)
        if positions.shape[:2] != (1, 1) or not torch.equal(
            positions[0, 0].to(expected.dtype), expected
        ):
            raise ValueError(
                "a streaming cache positions tokens by their slot, shared by the "
                f"batch: expected positions (1, 1, T) = {expected.tolist()}, got "
                f"{tuple(positions.shape)} = {positions.flatten().tolist()}"
            )
        self.seen += k.shape[-2]
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat((self.k, k), dim=-2)
            self.v = torch.cat((self.v, v), dim=-2)
        if len(self) > self.capacity:
            keep = torch.cat(
                (
                    torch.arange(self.sink_tokens),
                    torch.arange(len(self) - self.window, len(self)),
                )
            ).to(self.k.device)
            self.k = self.k.index_select(-2, keep)
            self.v = self.v.index_select(-2, keep)
        self.positions = torch.arange(len(self), device=k.device).view(1, 1, -1)
        return self.k, self.v, self.positions


class StreamingKVCache(KVCache):
    """A :class:`StreamingLayerKVCache` per layer: ``len(cache)`` counts the tokens
    seen, :meth:`next_positions` gives the slots of the next tokens (for the model's
    embedding and the queries).

    Args:
        num_layers: N. sink_tokens: S first tokens kept for good (StreamingLLM uses
            4; 0 gives plain window attention with re-positioned keys). window: W
            most recent tokens kept, the new one included.
    """

    def __init__(self, num_layers: int, *, sink_tokens: int, window: int) -> None:
        num_layers = check_int("num_layers", num_layers, minimum=1)
        self.layers = [
            StreamingLayerKVCache(sink_tokens, window) for _ in range(num_layers)
        ]

    def __len__(self) -> int:
        return self.layers[0].seen

    def next_positions(
        self, seq_len: int, *, device: torch.device | str | None = None
    ) -> torch.Tensor:
        slots = self.layers[0].next_slots(seq_len)
        return torch.arange(slots.start, slots.stop, device=device)
