"""Synthetic probes of retrieval over a distance (copy, associative recall,
passkey), what a model with no positional information scores on them (their floors,
exact), and a model's accuracy on them: the probe part of the length-generalization
study (:mod:`posenc.experiments.study`), explained in the chapter "The study's results".

Shapes:
    B items of a probe batch, T bytes each: inputs and targets (B, T) int64, the
    targets −100 wherever nothing is scored, and the needle's depth (B,); accuracy is
    the mean over the scored positions.
"""

from __future__ import annotations

import functools
import math

import torch

from ..layers.model import TinyLM

#: The probes and what each tests (see :func:`probe_batch`).
PROBES = {
    "copy": "repeat a 16-byte segment seen earlier, at a distance that grows with T",
    "associative_recall": "8 key-value pairs, then the keys in a new order: the values",
    "passkey": "a 5-byte key hidden at a random depth in noise, asked for at the end",
}

#: Byte ranges of the probes' vocabulary: noise, keys and values never overlap.
_NOISE = (1, 128)
_SYMBOLS = (128, 160)
_VALUES = (192, 224)
_MARK, _QUERY = 0, 255
#: How many byte values an answer is drawn from (the symbols' and the values' ranges).
ANSWER_VALUES = _SYMBOLS[1] - _SYMBOLS[0]
assert ANSWER_VALUES == _VALUES[1] - _VALUES[0]
#: Sizes of the probes' answers: the copied segment, the key–value pairs of recall, the
#: passkey's bytes.
COPY_SEGMENT, RECALL_PAIRS, PASSKEY_LENGTH = 16, 8, 5


def _randint(lo_hi, shape, generator):
    return torch.randint(lo_hi[0], lo_hi[1], shape, generator=generator)


def _distinct(lo_hi, batch, count, generator):
    return (
        torch.argsort(torch.rand(batch, lo_hi[1] - lo_hi[0], generator=generator))[
            :, :count
        ]
        + lo_hi[0]
    )


def probe_batch(
    task: str, batch_size: int, seq_len: int, *, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Synthetic sequences that only a model that retrieves over a distance can
    complete.

    * ``copy``: noise, a segment of 16 distinct bytes, noise, then the segment again;
      the targets are the repeated segment's bytes 2 … 16 (induction: each follows the
      byte it followed before).
    * ``associative_recall``: 8 key–value pairs, noise, then the 8 keys in a random
      order, each followed by its value; the values are the targets (multi-query
      associative recall, Arora et al. 2023).
    * ``passkey``: noise with a marker and 5 key bytes at a uniformly random depth, then
      a query marker; the 5 key bytes are the targets (after Mohtashami & Jaggi
      2023, whose filler is repeated sentences; here random bytes).

    Noise, keys and values come from disjoint byte ranges, so the answer is never
    ambiguous; the distance to retrieve over grows with ``seq_len``.

    Args:
        task: a key of :data:`PROBES`. batch_size: B. seq_len: T ≥ 40.
        generator: CPU generator (reproducible sequences).

    Returns:
        ``(x, y, depth)``: int64 (B, T) inputs and targets, with −100 where nothing is
        scored, and float (B,) the depth of the needle in [0, 1] (its start / T).

    Raises:
        ValueError: unknown task, or seq_len < 40.
    """
    if task not in PROBES:
        raise ValueError(f"task must be one of {sorted(PROBES)}, got {task!r}")
    if seq_len < 40:
        raise ValueError(f"seq_len must be >= 40 for the probes, got {seq_len}")
    B, n = batch_size, seq_len + 1
    seq = _randint(_NOISE, (B, n), generator)
    y_mask = torch.zeros(B, n, dtype=torch.bool)
    rows = torch.arange(B)[:, None]
    if task == "copy":
        k = COPY_SEGMENT
        seg = _distinct(_SYMBOLS, B, k, generator)
        start = torch.randint(0, n - 2 * k - 1, (B, 1), generator=generator)
        first = start + torch.arange(k)
        second = (n - k) + torch.arange(k)
        seq[rows, first] = seg
        seq[:, second] = seg
        y_mask[:, second[1:]] = True
        depth = start[:, 0].float() / seq_len
    elif task == "associative_recall":
        pairs = RECALL_PAIRS
        keys = _distinct(_SYMBOLS, B, pairs, generator)
        values = _randint(_VALUES, (B, pairs), generator)
        seq[:, 0 : 2 * pairs : 2], seq[:, 1 : 2 * pairs : 2] = keys, values
        order = torch.argsort(torch.rand(B, pairs, generator=generator))
        q0 = n - 2 * pairs
        seq[:, q0::2] = keys.gather(1, order)
        seq[:, q0 + 1 :: 2] = values.gather(1, order)
        y_mask[:, q0 + 1 :: 2] = True
        depth = torch.zeros(B)
    else:  # passkey
        k = PASSKEY_LENGTH
        key = _randint(_SYMBOLS, (B, k), generator)
        start = torch.randint(0, n - 2 * (k + 1), (B, 1), generator=generator)
        seq[rows, start] = _MARK
        seq[rows, start + 1 + torch.arange(k)] = key
        q0 = n - (k + 1)
        seq[:, q0] = _QUERY
        seq[:, q0 + 1 :] = key
        y_mask[:, q0 + 1 :] = True
        depth = start[:, 0].float() / seq_len
    x, y = seq[:, :-1], seq[:, 1:].clone()
    y[~y_mask[:, 1:]] = -100
    return x, y, depth


# --- probe floors ---------------------------------------------------------------------
#
# What a model with no positional information scores on a probe, by guessing among the
# answers in its context. Two guessers that know which bytes the context holds but not
# where they stand:
#
# * uniform: guesses uniformly among the distinct answer-range bytes of its context;
# * bag: also knows which of those answers it has already given, sets them aside, and
#   guesses the most frequent of the answers still to come (ties split evenly). This is
#   as well as any guesser can do that knows the answers still to come but not their
#   order, so it bounds what position-free guessing reaches from above.
#
# The floor of a probe is the bag guesser's accuracy, the higher of the two. Each is
# computed exactly from the generator's sizes; tests/test_study.py plays both guessers
# on sequences of probe_batch and requires the same numbers back.


def _set_partitions(length: int):
    """Every pattern of equalities among ``length`` draws, as restricted growth strings
    (0, then each entry at most one more than the largest before it)."""
    if length == 0:
        yield ()
        return
    for head in _set_partitions(length - 1):
        for label in range(max(head, default=-1) + 2):
            yield (*head, label)


def _pattern_probability(pattern: tuple[int, ...], alphabet: int) -> float:
    """Probability that ``len(pattern)`` independent uniform draws from ``alphabet``
    values show exactly this pattern of equalities."""
    distinct = max(pattern) + 1
    ways = math.prod(alphabet - i for i in range(distinct))
    return ways / alphabet ** len(pattern)


def _iid_floors(length: int, alphabet: int) -> dict[str, float]:
    """Floors of a probe whose ``length`` answers are independent uniform draws from
    ``alphabet`` values, all in the context before they are asked for, asked one after
    another with each given answer showing what it used up (recall, passkey).

    Asked for the j-th answer, the bag guesser's candidates are the answers not yet
    given, answers j … length−1 (their order in the context is unknown to it, so by
    exchangeability they are a uniform draw): it is right with probability
    [v_j is a most frequent of v_j … v_(length−1)] / (how many values tie). The uniform
    guesser picks one of the distinct values of all ``length`` answers.
    """
    uniform = bag = 0.0
    for pattern in _set_partitions(length):
        p = _pattern_probability(pattern, alphabet)
        uniform += p / (max(pattern) + 1)
        hits = 0.0
        for j in range(length):
            rest = pattern[j:]
            counts = {v: rest.count(v) for v in set(rest)}
            top = max(counts.values())
            if counts[rest[0]] == top:
                hits += 1 / sum(c == top for c in counts.values())
        bag += p * hits / length
    return {"uniform": uniform, "bag": bag}


def copy_floor() -> dict[str, float]:
    """Floors of the ``copy`` probe (:func:`probe_floor`): the segment's
    :data:`COPY_SEGMENT` bytes are distinct and all in the context, so the uniform
    guesser scores 1/16; the bag guesser, asked for segment byte i (i = 1 … 15), knows
    that bytes 0 … i−1 already occur twice and guesses among the 16 − i that occur once:
    the mean of 1/15, 1/14, …, 1/1."""
    k = COPY_SEGMENT
    return {"uniform": 1 / k, "bag": sum(1 / (k - i) for i in range(1, k)) / (k - 1)}


def recall_floor() -> dict[str, float]:
    """Floors of the ``associative_recall`` probe (:func:`probe_floor`): the
    :data:`RECALL_PAIRS` values are independent draws from the 32 value bytes; each
    asked key's value is one of the pairs not yet asked for."""
    return _iid_floors(RECALL_PAIRS, _VALUES[1] - _VALUES[0])


def passkey_floor() -> dict[str, float]:
    """Floors of the ``passkey`` probe (:func:`probe_floor`): the
    :data:`PASSKEY_LENGTH` key bytes are independent draws from the 32 symbol bytes,
    all in the context (the needle) before the query; each answered byte uses one up."""
    return _iid_floors(PASSKEY_LENGTH, _SYMBOLS[1] - _SYMBOLS[0])


#: One floor function per probe of :data:`PROBES`.
PROBE_FLOORS = {
    "copy": copy_floor,
    "associative_recall": recall_floor,
    "passkey": passkey_floor,
}


@functools.cache
def probe_floor(task: str) -> float:
    """The accuracy a model with no positional information can reach on a probe by
    guessing among the answers in its context: the bag guesser's (see the section's
    comment and :data:`PROBE_FLOORS`), exact.

    Args:
        task: a key of :data:`PROBES`.

    Returns:
        The floor, a probability (mean accuracy over a sequence's scored bytes).

    Raises:
        ValueError: unknown task.
    """
    if task not in PROBES:
        raise ValueError(f"task must be one of {sorted(PROBES)}, got {task!r}")
    return PROBE_FLOORS[task]()["bag"]


def probe_learned(accuracy: float, task: str) -> bool:
    """Whether an accuracy at the training length counts as having learned the probe:
    at least halfway from the probe's floor (:func:`probe_floor`) to 1."""
    floor = probe_floor(task)
    return accuracy >= floor + (1 - floor) / 2


@functools.cache
def scored_bytes(task: str) -> int:
    """How many bytes of one probe sequence are scored (the same at every length):
    copy 15, associative recall 8, passkey 5. Raises ValueError for an unknown task."""
    if task not in PROBES:
        raise ValueError(f"task must be one of {sorted(PROBES)}, got {task!r}")
    _, targets, _ = probe_batch(task, 1, 64, generator=torch.Generator().manual_seed(0))
    return int((targets != -100).sum())


def probe_interval(
    accuracy: float, task: str, sequences: int, confidence: float = 0.95
) -> tuple[float, float]:
    """The Wilson score interval of one model's probe accuracy over its scored bytes
    (Wilson 1927; scipy's ``binomtest(...).proportion_ci(method="wilson")``).

    :func:`probe_accuracy` scores ``sequences`` sequences of :func:`scored_bytes`
    bytes each, so its ``"accuracy"`` is a count of hits over n = sequences × scored
    bytes (a depth bucket covers fewer sequences: not this function's input). The
    interval treats those bytes as independent. The bytes of one sequence share their
    context and tend to be right or wrong together, so the interval is too narrow: a
    lower bound on the uncertainty of one seed's accuracy. Compare models across seeds
    (:func:`posenc.experiments.stats.mean_ci`).

    Args:
        accuracy: a value of :func:`probe_accuracy`, in [0, 1].
        task: a key of :data:`PROBES`. sequences: the sequences scored (≥ 1).
        confidence: the interval's coverage, in (0, 1).

    Returns:
        ``(lower, upper)``, proportions.

    Raises:
        ValueError: an accuracy outside [0, 1], sequences below 1, or an unknown task.
    """
    from scipy.stats import binomtest

    if not 0 <= accuracy <= 1:
        raise ValueError(f"accuracy must lie in [0, 1], got {accuracy}")
    if sequences < 1:
        raise ValueError(f"sequences must be at least 1, got {sequences}")
    n = sequences * scored_bytes(task)
    ci = binomtest(round(accuracy * n), n).proportion_ci(confidence, method="wilson")
    return float(ci.low), float(ci.high)


@torch.no_grad()
def probe_accuracy(
    model: TinyLM,
    task: str,
    seq_len: int,
    *,
    sequences: int,
    seed: int = 12345,
    batch_size: int = 32,
) -> dict[str, float]:
    """Accuracy (argmax = target) on the scored bytes of ``sequences`` fresh probe
    sequences of length ``seq_len``: ``{"accuracy": ..., "accuracy_depth_0.00": ...,
    ...}`` with the needle's depth in quarters for ``copy`` and ``passkey``."""
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    hits, depths = [], []
    for i in range(0, sequences, batch_size):
        x, y, depth = probe_batch(
            task, min(batch_size, sequences - i), seq_len, generator=generator
        )
        pred = model(x.to(device)).argmax(-1).cpu()
        scored = y != -100
        hits.append(((pred == y) & scored).sum(1).float() / scored.sum(1))
        depths.append(depth)
    hit, depth = torch.cat(hits), torch.cat(depths)
    out = {"accuracy": float(hit.mean())}
    if task != "associative_recall":
        quarter = (depth * 4).clamp(max=3.999).floor()
        for q in range(4):
            sel = quarter == q
            if sel.any():
                out[f"accuracy_depth_{q / 4:.2f}"] = float(hit[sel].mean())
    return out
