"""A controlled, multi-seed study of length generalization (the study tier).

Every registered scheme is trained on the recursive standard-library corpus at a
training length L with several seeds, a learning rate chosen per scheme by a small
sweep, and the same data order per seed for every scheme (a paired design); then scored
at 1×, 2×, 4× and 8× L by two protocols and by three synthetic probes. Each run's result
is a small JSON file in the repository (``src/posenc/results/<study>/``), keyed by a
hash of its configuration and stored with its provenance, so that

* ``python -m posenc.study`` (``make study``) runs what is missing and resumes where an
  interrupted study stopped; a changed scheme changes its keys, so only its own runs
  rerun;
* :func:`load_results` returns a pandas DataFrame of the whole grid and raises when the
  stored files do not cover it (stale);
* ``python -m posenc.study --check`` (in ``make test``) reruns a stated sample and
  requires the stored values back within :data:`REPRODUCE_TOLERANCE`.

The design, the protocols and the statistics are explained in the chapter "Length
generalization: a controlled study". Usage::

    python -m posenc.study [--preset cpu|gpu] [--workers N] [--list] [--check]

The preset is ``cpu`` unless named: the book reads the cpu study on every machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import time
from collections import defaultdict
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

from .data import Corpus, load_stdlib_corpus
from .model import LAYER_PRESETS, ModelConfig, TinyLM, layer_preset
from .prepare import worker_pool
from .schemes import available_schemes
from .train import TrainConfig, cache_key, fit, scheme_arguments, tqdm, train
from .utils import get_device, seed_everything, usable_cpus

#: Bump when a change to the study's code (not to a scheme) changes its results.
STUDY_VERSION = 1

#: The evaluation lengths, as multiples of the training length.
MULTIPLES = (1, 2, 4, 8)

#: The probes and what each tests (see :func:`probe_batch`).
PROBES = {
    "copy": "repeat a 16-byte segment seen earlier, at a distance that grows with T",
    "associative_recall": "8 key-value pairs, then the keys in a new order: the values",
    "passkey": "a 5-byte key hidden at a random depth in noise, asked for at the end",
}

#: Stored and recomputed values must agree this closely: nats per byte for losses,
#: proportion for a probe's accuracy over all its sequences. On one CPU and one torch
#: build the runs are deterministic and reproduce exactly (measured: difference 0).
#: Another CPU's kernels sum in another order; two torch threads instead of one do the
#: same, and moved the recomputed losses by up to 0.003 nats (RoPE; ALiBi: 0). The
#: probes are fragile: the same perturbation moved ALiBi's half-learned probes by up to
#: 0.077, and turned DeBERTa's associative recall from 0.77 into 1.0 (a phase change),
#: while DeBERTa's learned copy and passkey probes moved by at most 0.017. So the
#: sample's probe is DeBERTa's, compared on :data:`REPRODUCE_PROBE_TASKS`.
REPRODUCE_TOLERANCE = {"loss": 0.02, "accuracy": 0.05}
#: The probes whose accuracy the reproduction check compares (see above).
REPRODUCE_PROBE_TASKS = ("copy", "passkey")

PRESETS: dict[str, dict] = {
    # 2-core CPU: about an hour with two processes (the measured wall time is stored)
    "cpu": {
        "model": {"d_model": 64, "num_heads": 2, "num_layers": 2},
        "train": {"seq_len": 64, "batch_size": 32, "steps": 1000, "warmup_steps": 50},
        "learning_rates": (3e-3, 1e-2, 3e-2),
        "seeds": (0, 1, 2),
        "long_length": 256,
        "long_schemes": ("none", "rope", "alibi"),
        "long_seeds": (0, 1, 2),
        "block_every": 8,
        "long_block_every": 32,
        "probe_steps": 2000,
        "probe_batch_size": 16,
        "probe_lr": 3e-3,
        "probe_sequences": 192,
    },
    # a GPU: a wider model, 5 seeds, every validation block scored
    "gpu": {
        "model": {"d_model": 256, "num_heads": 4, "num_layers": 4},
        "train": {"seq_len": 64, "batch_size": 64, "steps": 4000, "warmup_steps": 200},
        "learning_rates": (3e-4, 1e-3, 3e-3),
        "seeds": (0, 1, 2, 3, 4),
        "long_length": 256,
        "long_schemes": ("none", "sinusoidal", "learned", "rope", "alibi", "t5"),
        "long_seeds": (0, 1, 2),
        "block_every": 1,
        "long_block_every": 1,
        "probe_steps": 6000,
        "probe_batch_size": 32,
        "probe_lr": 1e-3,
        "probe_sequences": 1024,
    },
}


def bucket_variants(train_length: int) -> dict[str, dict]:
    """Relative schemes whose bucket range is set to the training length, beside their
    defaults (a range past L leaves the outer buckets untrained): ``{label: {"scheme":
    ..., "options": ...}}``."""
    return {
        "t5, max_distance = L": {
            "scheme": "t5",
            "options": {"max_distance": train_length},
        },
        "deberta, max_position = L": {
            "scheme": "deberta",
            "options": {"max_position": train_length},
        },
    }


#: p of the p-RoPE variant: the fraction of RoPE's frequencies kept, the lowest
#: (1 − p) set to zero (Barbero et al. 2025, §6, whose Gemma 2B run found 0.75 best).
P_ROPE_FRACTION = 0.75

#: The layer patterns of today's models in the study (posenc.model.LAYER_PRESETS).
STUDY_LAYER_PRESETS = ("llama4", "gemma3", "smollm3", "command_r7b", "gpt_oss")


def pattern_variants(train_length: int, num_layers: int) -> dict[str, dict]:
    """The variants of RoPE that today's models use, trained like the schemes (language
    modelling and probes) at RoPE's swept learning rate: p-RoPE, and each model's
    layer pattern (:func:`posenc.model.layer_preset`) with window or chunk L/4 and the
    period shortened to ``num_layers`` where the model's is longer (the CPU preset's 2
    layers: one local and one global layer).

    Returns:
        ``{label: {"scheme": ..., "options": ..., "layers": list | None}}``.
    """
    out = {
        f"rope, p = {P_ROPE_FRACTION}": {
            "scheme": "rope",
            "options": {
                "scaling": {
                    "rope_type": "proportional",
                    "partial_rotary_factor": P_ROPE_FRACTION,
                }
            },
            "layers": None,
        }
    }
    window = max(1, train_length // 4)
    for name in STUDY_LAYER_PRESETS:
        period = min(LAYER_PRESETS[name]["period"], num_layers)
        out[f"pattern: {name}"] = {
            "scheme": "rope",
            "options": {},
            "layers": layer_preset(name, num_layers, window=window, period=period),
        }
    return out


@dataclass(frozen=True)
class StudyRun:
    """One cell of the grid.

    Attributes:
        kind: ``"sweep"`` (seed 0 at one learning rate, scored at L only), ``"lm"``
            (language modelling, scored at every multiple of L) or ``"probe"``.
        label: the scheme's name in the results (a bucket variant has its own).
        scheme: the registered scheme. options: its options, as JSON text.
        seed: seeds the initialisation and the data order. train_length: L.
        lr: the peak learning rate.
        preset: a key of :data:`PRESETS`.
        layers: a layer pattern (:attr:`posenc.model.ModelConfig.layers`) as JSON
            text, or "" for a uniform model.
    """

    kind: str
    label: str
    scheme: str
    options: str
    seed: int
    train_length: int
    lr: float
    preset: str = "cpu"
    layers: str = ""

    @property
    def scheme_options(self) -> dict:
        return json.loads(self.options)

    def configs(self) -> tuple[ModelConfig, TrainConfig]:
        """The model and training configuration (tokens per step do not depend on
        L)."""
        p = PRESETS[self.preset]
        options = self.scheme_options
        if self.scheme == "learned":
            options.setdefault("max_len", 4 * self.train_length)
        base = TrainConfig(**p["train"])
        batch_size = max(1, base.batch_size * base.seq_len // self.train_length)
        if self.kind == "probe":
            steps, batch_size = p["probe_steps"], p["probe_batch_size"]
        else:
            steps = base.steps
        train_cfg = replace(
            base,
            seq_len=self.train_length,
            batch_size=batch_size,
            steps=steps,
            lr=self.lr,
            seed=self.seed,
        )
        layers = json.loads(self.layers) if self.layers else None
        model_cfg = ModelConfig(
            scheme=self.scheme, scheme_options=options, layers=layers, **p["model"]
        )
        return model_cfg, train_cfg

    def evaluation(self) -> dict:
        """What is scored: part of the key, so a changed protocol reruns."""
        p = PRESETS[self.preset]
        if self.kind == "sweep":
            return {"protocol": "sliding", "multiples": [1], "block_every": 4}
        if self.kind == "probe":
            return {
                "probes": sorted(PROBES),
                "multiples": list(MULTIPLES),
                "sequences": p["probe_sequences"],
            }
        long = self.train_length != p["train"]["seq_len"]
        return {
            "protocol": "sliding+matched",
            "multiples": list(MULTIPLES),
            "block_every": p["long_block_every" if long else "block_every"],
        }

    def key(self, corpus: Corpus) -> str:
        """A stable hash of everything that determines this run's results."""
        model_cfg, train_cfg = self.configs()
        payload = {
            "study": STUDY_VERSION,
            "kind": self.kind,
            "train": cache_key(model_cfg, train_cfg, corpus),
            "scheme_arguments": scheme_arguments(model_cfg),
            "evaluation": self.evaluation(),
        }
        text = json.dumps(payload, sort_keys=True, default=str)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return f"{self.kind}-{self.scheme}-s{self.seed}-L{self.train_length}-{digest}"


# --- the data and the probes ---------------------------------------------------------


def study_corpus() -> Corpus:
    """The study's corpus: the recursive standard library (:func:`posenc.data.
    load_stdlib_corpus` with ``recursive=True``), whose validation split is over 1 MB
    in many files."""
    return load_stdlib_corpus(recursive=True)


#: Byte ranges of the probes' vocabulary: noise, keys and values never overlap.
_NOISE = (1, 128)
_SYMBOLS = (128, 160)
_VALUES = (192, 224)
_MARK, _QUERY = 0, 255
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


# --- language-modelling evaluation --------------------------------------------------


@torch.no_grad()
def window_losses(
    model: TinyLM,
    documents: list[torch.Tensor],
    train_length: int,
    multiples=MULTIPLES,
    *,
    block_every: int = 1,
    tokens_per_batch: int = 16384,
) -> dict:
    """Score validation documents block by block at several window lengths.

    Each document's next-byte targets are cut into blocks of L = ``train_length``
    bytes; every ``block_every``-th block (counted over the whole split) is scored, at
    each window length E = m·L, by the window of E bytes that ends with the block
    (fewer near the start of a document: windows never cross a document boundary). Only
    the block's L bytes are scored, so each byte is predicted with between E − L + 1
    and E bytes of context: the sliding-window evaluation of Press et al. (2022, §B.1),
    here with stride L (their §B.2 uses stride 1). A block with at least (max E − L)
    bytes before it in its document (the largest E requested, also where the scheme
    cannot run it) is *matched*: it is scored with exactly E − L preceding bytes at
    every E, so comparing E's on matched blocks changes only the context, never the
    bytes scored.

    Args:
        model: a TinyLM. documents: uint8 tensors, one per file. train_length: L.
        multiples: the E / L values; lengths past the scheme's ``max_positions`` are
            skipped. block_every: score one block in this many. tokens_per_batch:
            forward-pass size.

    Returns:
        ``{"sliding": {E: mean loss}, "matched": {E: mean loss}, "blocks": n scored,
        "matched_blocks": n matched, "bytes": bytes scored, "position": list, mean loss
        at each position of the full-length windows of the largest E}`` (nats).
    """
    limit = model.max_positions
    lengths = [m * train_length for m in multiples]
    # matched blocks are those with room for the largest *requested* window, also for a
    # scheme that cannot run it (a learned table), so that every scheme's matched set
    # is the same
    threshold = max(lengths) - train_length
    lengths = [e for e in lengths if limit is None or e <= limit]
    longest = max(lengths)
    device = next(model.parameters()).device
    blocks = []  # (document, end of the block's targets, matched)
    counter = 0
    for d, doc in enumerate(documents):
        targets = doc.numel() - 1
        for end in range(train_length, targets + 1, train_length):
            if counter % block_every == 0:
                blocks.append((d, end, end - train_length >= threshold))
            counter += 1
    sliding, matched, position = {}, {}, None
    for E in lengths:
        windows = defaultdict(list)  # window length -> [(doc, start, block index)]
        for i, (d, end, _) in enumerate(blocks):
            start = max(0, end - E)
            windows[end - start].append((d, start, i))
        block_loss = torch.empty(len(blocks), dtype=torch.float64)
        pos_sum, pos_n = None, 0
        for length, items in windows.items():
            per = max(1, tokens_per_batch // length)
            for j in range(0, len(items), per):
                chunk = items[j : j + per]
                seqs = torch.stack(
                    [documents[d][s : s + length + 1] for d, s, _ in chunk]
                ).long()
                x, y = seqs[:, :-1].to(device), seqs[:, 1:].to(device)
                loss = (
                    F.cross_entropy(
                        model(x).float().transpose(1, 2), y, reduction="none"
                    )
                    .cpu()
                    .double()
                )
                idx = torch.tensor([i for _, _, i in chunk])
                block_loss[idx] = loss[:, -train_length:].mean(1)
                if E == longest and length == E:
                    pos_sum = loss.sum(0) if pos_sum is None else pos_sum + loss.sum(0)
                    pos_n += loss.shape[0]
        is_matched = torch.tensor([m for _, _, m in blocks])
        sliding[E] = float(block_loss.mean())
        if is_matched.any():
            matched[E] = float(block_loss[is_matched].mean())
        if pos_sum is not None:
            position = (pos_sum / pos_n).tolist()
    return {
        "sliding": sliding,
        "matched": matched,
        "blocks": len(blocks),
        "matched_blocks": int(sum(m for _, _, m in blocks)),
        "bytes": len(blocks) * train_length,
        "position": position,
    }


# --- running one cell ---------------------------------------------------------------


def _provenance() -> dict:
    import posenc

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "posenc": posenc.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu,
        "threads": torch.get_num_threads(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _curve(losses: list[float], every: int = 10) -> list[float]:
    """Training losses averaged over consecutive groups of ``every`` steps."""
    return [
        round(sum(losses[i : i + every]) / len(losses[i : i + every]), 4)
        for i in range(0, len(losses), every)
    ]


def execute(run: StudyRun, corpus: Corpus | None = None, *, device=None) -> dict:
    """Train and score one cell of the grid; the record :func:`run_study` stores.

    Language-modelling runs go through :func:`posenc.train.train` (their weights are
    cached like the book's); probe runs train on :func:`probe_batch` and are not cached.
    """
    corpus = corpus if corpus is not None else study_corpus()
    device = torch.device(device) if device is not None else get_device()
    model_cfg, train_cfg = run.configs()
    start = time.perf_counter()
    rows: list[dict] = []
    extra: dict = {}
    if run.kind == "probe":
        generator = seed_everything(train_cfg.seed)
        model = TinyLM(model_cfg).to(device)
        tasks = sorted(PROBES)
        step = iter(range(10**9))

        def next_batch():
            task = tasks[next(step) % len(tasks)]
            x, y, _ = probe_batch(
                task, train_cfg.batch_size, train_cfg.seq_len, generator=generator
            )
            return x.to(device), y.to(device)

        losses, train_seconds = fit(model, train_cfg, next_batch, progress=False)
        limit = model.max_positions
        sequences = run.evaluation()["sequences"]
        for m in MULTIPLES:
            E = m * run.train_length
            if limit is not None and E > limit:
                continue
            for task in tasks:
                for metric, value in probe_accuracy(
                    model, task, E, sequences=sequences
                ).items():
                    rows.append(_row(task, metric, E, value))
    else:
        result = train(model_cfg, train_cfg, corpus, device=device, progress=False)
        losses, train_seconds, model = result.losses, result.seconds, result.model
        extra["weights_from_cache"] = result.from_cache
        spec = run.evaluation()
        scores = window_losses(
            model,
            corpus.val_documents(),
            run.train_length,
            spec["multiples"],
            block_every=spec["block_every"],
        )
        for protocol in ("sliding", "matched"):
            for E, value in scores[protocol].items():
                rows.append(_row("language_modeling", f"loss_{protocol}", E, value))
        extra.update({k: scores[k] for k in ("blocks", "matched_blocks", "bytes")})
        if run.kind == "lm":
            extra["position_loss"] = [round(v, 4) for v in scores["position"]]
    return {
        "key": run.key(corpus),
        "run": asdict(run),
        "model": {
            **model_cfg.to_dict(),
            "scheme_options": scheme_arguments(model_cfg),
            "d_head": model_cfg.d_model // model_cfg.num_heads,
        },
        "train": asdict(train_cfg),
        "evaluation": run.evaluation(),
        "corpus": [corpus.name, corpus.fingerprint],
        "parameters": TinyLM(model_cfg).num_parameters(),
        "rows": rows,
        "train_loss": _curve(losses),
        **extra,
        "provenance": {
            **_provenance(),
            "device": str(device),
            "train_seconds": round(train_seconds, 2),
            "wall_seconds": round(time.perf_counter() - start, 2),
        },
    }


def _row(task: str, metric: str, eval_length: int, value: float) -> dict:
    return {
        "task": task,
        "metric": metric,
        "eval_length": int(eval_length),
        "value": float(value),
    }


# --- the grid -------------------------------------------------------------------------


def results_dir(name: str = "length_generalization") -> Path:
    """Where the study's results are stored: ``src/posenc/results/<name>/`` (inside
    the package, so an installed posenc carries them)."""
    return Path(__file__).parent / "results" / name


def _stored(name: str, preset: str) -> dict[str, dict]:
    folder = results_dir(name if preset == "cpu" else f"{name}-{preset}")
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def _schemes(train_length: int, num_layers: int) -> dict[str, tuple]:
    """``{label: (scheme, options, layers, kinds)}``: every registered scheme at its
    defaults, the bucket variants (language modelling only), then the variants of
    today's models (:func:`pattern_variants`)."""
    out = {name: (name, {}, None, ("lm", "probe")) for name in available_schemes()}
    for label, v in bucket_variants(train_length).items():
        out[label] = (v["scheme"], v["options"], None, ("lm",))
    for label, v in pattern_variants(train_length, num_layers).items():
        out[label] = (v["scheme"], v["options"], v["layers"], ("lm", "probe"))
    return out


def sweep_runs(preset: str = "cpu") -> list[StudyRun]:
    """Phase 1: each registered scheme, seed 0, at each learning rate of the preset."""
    p = PRESETS[preset]
    L = p["train"]["seq_len"]
    return [
        StudyRun("sweep", name, name, "{}", 0, L, lr, preset)
        for name in available_schemes()
        for lr in p["learning_rates"]
    ]


def best_learning_rates(
    records: dict[str, dict], preset: str = "cpu", corpus: Corpus | None = None
) -> dict[str, float]:
    """``{scheme: the swept learning rate with the lowest validation loss at L}``, from
    the stored sweep records; raises KeyError naming a missing sweep run."""
    corpus = corpus if corpus is not None else study_corpus()
    best: dict[str, tuple[float, float]] = {}
    for run in sweep_runs(preset):
        key = run.key(corpus)
        if key not in records:
            raise KeyError(f"sweep run {key} ({run.scheme}, lr {run.lr}) is missing")
        (row,) = [r for r in records[key]["rows"] if r["metric"] == "loss_sliding"]
        if run.scheme not in best or row["value"] < best[run.scheme][1]:
            best[run.scheme] = (run.lr, row["value"])
    return {scheme: lr for scheme, (lr, _) in best.items()}


def main_runs(lrs: dict[str, float], preset: str = "cpu") -> list[StudyRun]:
    """Phase 2, given each scheme's learning rate: every scheme (and bucket variant)
    × every seed at L for language modelling; every scheme × every seed at L for the
    probes (at the preset's ``probe_lr``); the long-L schemes × their seeds at the
    preset's longer L."""
    p = PRESETS[preset]
    L = p["train"]["seq_len"]
    runs = []
    for label, (scheme, options, layers, kinds) in _schemes(
        L, p["model"]["num_layers"]
    ).items():
        text = json.dumps(options, sort_keys=True)
        pattern = "" if layers is None else json.dumps(layers, sort_keys=True)
        for kind in kinds:
            # the probes train at one stated learning rate for every scheme
            lr = p["probe_lr"] if kind == "probe" else lrs[scheme]
            runs += [
                StudyRun(kind, label, scheme, text, s, L, lr, preset, pattern)
                for s in p["seeds"]
            ]
    for scheme in p["long_schemes"]:
        runs += [
            StudyRun(
                "lm", scheme, scheme, "{}", s, p["long_length"], lrs[scheme], preset
            )
            for s in p["long_seeds"]
        ]
    return runs


def _run_cell(run: StudyRun, device: str) -> dict:
    return execute(run, study_corpus(), device=device)


def _execute_all(runs, folder: Path, corpus, workers: int, device: str, desc: str):
    todo = [r for r in runs if not (folder / f"{r.key(corpus)}.json").exists()]
    if not todo:
        return 0.0
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    bar = tqdm(total=len(todo), desc=desc, unit="run", file=sys.stdout)
    # the slowest cells first, so that the processes finish together
    todo.sort(key=lambda r: (r.kind != "lm", -r.train_length))

    def store(run: StudyRun, record: dict) -> None:
        path = folder / f"{record['key']}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=None) + "\n")
        os.replace(tmp, path)
        bar.update(1)
        bar.set_postfix_str(
            f"{run.kind} {run.label} s{run.seed}: "
            f"{record['provenance']['wall_seconds']:.0f} s"
        )

    if workers == 0:  # in this process, one cell after another
        for run in todo:
            store(run, execute(run, corpus, device=device))
    else:
        with worker_pool(workers) as pool:
            futures = {pool.submit(_run_cell, r, device): r for r in todo}
            while futures:
                done, _ = wait(futures, return_when=FIRST_COMPLETED)
                for future in done:
                    store(futures.pop(future), future.result())
    bar.close()
    return time.perf_counter() - start


def run_study(
    name: str = "length_generalization",
    *,
    preset: str = "cpu",
    workers: int | None = None,
    device: str = "cpu",
    kinds=("sweep", "lm", "probe"),
    prune: bool = True,
) -> dict:
    """Run every missing cell of the grid (resumable), then, when every kind was run,
    drop stored files that no longer belong to it. Returns ``{"wall_seconds": ...,
    "runs": n}``.

    Args:
        name: the study's folder under :func:`results_dir`. preset: a key of
            :data:`PRESETS`. workers: processes (default: usable cores; 1 on a GPU;
            0 runs every cell in this process).
        device: where to run. kinds: run only these kinds of cells (the sweep always
            runs first: the main runs depend on it). prune: drop stale files.

    Raises:
        ValueError: unknown preset.
    """
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    if workers is None:
        workers = 1 if device != "cpu" else usable_cpus()
    folder = results_dir(name if preset == "cpu" else f"{name}-{preset}")
    corpus = study_corpus()
    wall = _execute_all(
        sweep_runs(preset), folder, corpus, workers, device, "learning-rate sweep"
    )
    lrs = best_learning_rates(_stored(name, preset), preset, corpus)
    runs = sweep_runs(preset) + main_runs(lrs, preset)
    chosen = [r for r in runs if r.kind in kinds]
    wall += _execute_all(chosen, folder, corpus, workers, device, "study")
    keep = {r.key(corpus) for r in runs}
    if prune and set(kinds) >= {"sweep", "lm", "probe"}:
        for path in folder.glob("*.json"):
            if path.stem not in keep:
                path.unlink()
    return {"wall_seconds": wall, "runs": len(runs)}


@dataclass(frozen=True)
class CorpusIdentity:
    """What a run's key knows of its corpus: its name and fingerprint."""

    name: str
    fingerprint: str


def stored_corpus(records: dict[str, dict]) -> Corpus | CorpusIdentity:
    """The corpus the stored results were computed on, as their keys know it.

    The standard library's source differs between Python versions, so on another
    Python (Colab) the local corpus is not the study's: the stored results still
    describe the study's corpus, and their keys are checked against the current
    configuration with that corpus's identity. With nothing stored (or records that
    disagree), the local corpus."""
    identities = {tuple(rec["corpus"]) for rec in records.values() if "corpus" in rec}
    if len(identities) == 1:
        return CorpusIdentity(*identities.pop())
    return study_corpus()


def grid(preset: str = "cpu", name: str = "length_generalization") -> list[StudyRun]:
    """Every run of the grid, with the learning rates read from the stored sweep."""
    records = _stored(name, preset)
    lrs = best_learning_rates(records, preset, stored_corpus(records))
    return sweep_runs(preset) + main_runs(lrs, preset)


class StaleResultsError(RuntimeError):
    """The stored results do not cover the current grid: run ``make study``."""


def load_records(
    name: str = "length_generalization", *, preset: str = "cpu", strict: bool = True
) -> list[dict]:
    """The stored record of every run of the current grid (see :func:`execute`).

    With ``strict=False`` the runs of the grid that are stored so far (a study still
    running, or interrupted) are returned instead of raising.

    Raises:
        StaleResultsError: a run of the grid has no stored result (its configuration,
        a scheme's defaults, the corpus or the study's code changed, or a scheme was
        added): the message names the runs and the command that recomputes them.
    """
    records = _stored(name, preset)
    corpus = stored_corpus(records)
    try:
        lrs = best_learning_rates(records, preset, corpus)
    except KeyError as err:
        if not strict:
            keys = {r.key(corpus) for r in sweep_runs(preset)}
            return [rec for key, rec in records.items() if key in keys]
        raise StaleResultsError(
            f"the stored study {name!r} is stale: {err.args[0]}; run `make study` "
            "(python -m posenc.study)"
        ) from None
    runs = sweep_runs(preset) + main_runs(lrs, preset)
    missing = [r for r in runs if r.key(corpus) not in records]
    if not strict:
        return [records[r.key(corpus)] for r in runs if r not in missing]
    if missing:
        names = ", ".join(f"{r.kind} {r.label} seed {r.seed}" for r in missing[:6])
        raise StaleResultsError(
            f"the stored study {name!r} is stale: {len(missing)} of {len(runs)} runs "
            f"have no stored result for the current configuration ({names}"
            f"{', ...' if len(missing) > 6 else ''}); run `make study` "
            "(python -m posenc.study)"
        )
    return [records[r.key(corpus)] for r in runs]


def load_results(
    name: str = "length_generalization", *, preset: str = "cpu", strict: bool = True
):
    """The study's results as a long pandas DataFrame, one row per measured value.

    Columns: ``scheme`` (the label: a registered scheme, or a bucket variant such as
    "t5, max_distance = L"), ``seed``, ``train_length``, ``eval_length`` (bytes),
    ``task`` ("language_modeling" or a probe of :data:`PROBES`), ``metric``
    (``loss_sliding`` and ``loss_matched`` in nats per byte, ``accuracy`` and
    ``accuracy_depth_*`` as proportions), ``value``, and ``kind`` ("sweep", "lm",
    "probe"), ``lr``, ``parameters``, ``key``.

    Args:
        name: the study. preset: ``"cpu"`` (the stored study) or ``"gpu"``.
        strict: raise when the grid is not fully stored; False returns what is.

    Raises:
        StaleResultsError: as :func:`load_records`.
    """
    import pandas as pd

    rows = []
    for rec in load_records(name, preset=preset, strict=strict):
        run = rec["run"]
        for row in rec["rows"]:
            if run["kind"] == "sweep" and row["metric"] != "loss_sliding":
                continue  # at E = L every block is "matched": the same number again
            rows.append(
                {
                    "scheme": run["label"],
                    "seed": run["seed"],
                    "train_length": run["train_length"],
                    **row,
                    "kind": run["kind"],
                    "lr": run["lr"],
                    "parameters": rec["parameters"],
                    "key": rec["key"],
                }
            )
    columns = [
        "scheme",
        "seed",
        "train_length",
        "eval_length",
        "task",
        "metric",
        "value",
        "kind",
        "lr",
        "parameters",
        "key",
    ]
    return pd.DataFrame(rows, columns=columns)


# --- statistics -------------------------------------------------------------------


def mean_ci(values, confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, lower, upper)``: the Student-t confidence interval of the mean over
    seeds (scipy.stats.t); with one value the interval is (nan, nan)."""
    import numpy as np
    from scipy import stats

    v = np.asarray(values, dtype=float)
    mean = float(v.mean())
    if v.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + confidence / 2, v.size - 1) * stats.sem(v))
    return mean, mean - half, mean + half


def _main_rows(df):
    """The rows of the main runs: a sweep run at the chosen rate is seed 0 again (its
    weights are the same), and at the other rates it is another model."""
    return df[df["kind"] != "sweep"] if "kind" in df.columns else df


def summarize(df, *, confidence: float = 0.95):
    """Mean and confidence interval over seeds of every (scheme, train_length,
    eval_length, task, metric) of the main runs (the sweep's rows are left out): a
    DataFrame with columns ``mean, lower, upper, n``."""
    import pandas as pd

    df = _main_rows(df)
    keys = ["scheme", "train_length", "eval_length", "task", "metric"]
    out = []
    for values, group in df.groupby(keys, sort=False):
        mean, lo, hi = mean_ci(group["value"], confidence)
        out.append((*values, mean, lo, hi, len(group)))
    return pd.DataFrame(out, columns=keys + ["mean", "lower", "upper", "n"])


def paired_difference(df, a: str, b: str, *, confidence: float = 0.95, **where) -> dict:
    """Scheme ``a`` minus scheme ``b``, seed by seed (the paired design: the same data
    order per seed), over the main runs' rows (not the sweep's) selected by ``where``
    (e.g. ``eval_length=512,
    metric="loss_sliding", train_length=64``).

    Returns:
        ``{"mean", "lower", "upper", "n", "resolved"}``; ``resolved`` is True when the
        interval excludes 0.

    Raises:
        ValueError: if the two schemes share no seed under ``where``.
    """
    sel = _main_rows(df)
    for column, value in where.items():
        sel = sel[sel[column] == value]
    ta = sel[sel["scheme"] == a].set_index("seed")["value"]
    tb = sel[sel["scheme"] == b].set_index("seed")["value"]
    seeds = sorted(set(ta.index) & set(tb.index))
    if not seeds:
        raise ValueError(f"schemes {a!r} and {b!r} share no seed under {where}")
    diff = [float(ta[s] - tb[s]) for s in seeds]
    mean, lo, hi = mean_ci(diff, confidence)
    resolved = bool(not math.isnan(lo) and (lo > 0 or hi < 0))
    return {
        "mean": mean,
        "lower": lo,
        "upper": hi,
        "n": len(seeds),
        "resolved": resolved,
    }


def quote(df, scheme: str, *, digits: int = 2, **where) -> str:
    """``"mean [lower, upper]"`` over seeds of one scheme's rows under ``where`` (e.g.
    ``eval_length=512, metric="loss_sliding", train_length=64``): how the chapters
    quote the study.

    Raises:
        ValueError: if no row matches.
    """
    sel = _main_rows(df)
    sel = sel[sel["scheme"] == scheme]
    for column, value in where.items():
        sel = sel[sel[column] == value]
    if sel.empty:
        raise ValueError(f"no stored value for scheme {scheme!r} under {where}")
    mean, lo, hi = mean_ci(sel["value"])
    if math.isnan(lo):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def results_table(
    df,
    *,
    schemes=None,
    train_length: int = 64,
    multiples=MULTIPLES,
    task: str = "language_modeling",
    metric: str = "loss_sliding",
    digits: int = 2,
) -> str:
    """A Markdown table, one row per scheme and one column per multiple of L, of
    ``mean [95 % CI]`` over seeds (:func:`quote`); "cannot run" where a scheme cannot
    process the length (a learned table past its end).

    Args:
        df: :func:`load_results`. schemes: labels to show, in order (default: all of
            ``df``'s at this training length). train_length: L. multiples: columns.
        task, metric: which values. digits: decimals.
    """
    sel = _main_rows(df)
    sel = sel[(sel["train_length"] == train_length) & (sel["task"] == task)]
    sel = sel[sel["metric"] == metric]
    schemes = (
        list(schemes) if schemes is not None else list(dict.fromkeys(sel["scheme"]))
    )
    heads = [f"{m}× L = {m * train_length}" for m in multiples]
    lines = ["| scheme | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    for scheme in schemes:
        cells = []
        for m in multiples:
            try:
                cells.append(
                    quote(sel, scheme, digits=digits, eval_length=m * train_length)
                )
            except ValueError:
                cells.append("cannot run")
        lines.append(f"| {scheme} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- reproduction -------------------------------------------------------------------


#: What ``--check`` reruns: one seed of two schemes (language modelling) and one probe.
REPRODUCE_SAMPLE = (("lm", "rope", 0), ("lm", "alibi", 0), ("probe", "deberta", 0))


def reproduce(
    name: str = "length_generalization",
    *,
    sample=REPRODUCE_SAMPLE,
    workers: int | None = None,
    device: str = "cpu",
    threads: int = 1,
) -> list[dict]:
    """Rerun :data:`REPRODUCE_SAMPLE` from scratch (no cached weights) and compare
    every value with the stored one.

    ``threads`` > 1 changes the order of floating-point reductions, as another CPU's
    kernels do: how :data:`REPRODUCE_TOLERANCE` was measured.

    Returns:
        One dict per compared value: kind, label, metric, eval_length, stored,
        recomputed, difference, tolerance, ok.

    Raises:
        StaleResultsError: the stored results do not cover the grid.
    """
    records = {r["key"]: r for r in load_records(name)}
    corpus = study_corpus()
    if stored_corpus(records).fingerprint != corpus.fingerprint:
        raise StaleResultsError(
            f"the stored study {name!r} was computed on the corpus "
            f"{stored_corpus(records)} (Python "
            f"{next(iter(records.values()))['provenance']['python']}); this Python's "
            f"standard library gives {corpus.name} {corpus.fingerprint}: the results "
            "cannot be reproduced here (run `make study` to recompute them)"
        )
    wanted = []
    for rec in records.values():
        run = StudyRun(**rec["run"])
        if (run.kind, run.label, run.seed) in sample and run.train_length == PRESETS[
            run.preset
        ]["train"]["seq_len"]:
            wanted.append(run)
    workers = workers or min(len(wanted), usable_cpus())
    with worker_pool(workers, threads, then=_private_weight_cache) as pool:
        fresh = list(pool.map(_run_cell, wanted, [device] * len(wanted)))
    out = []
    for run, new in zip(wanted, fresh, strict=True):
        old = records[run.key(corpus)]
        stored = {
            (r["task"], r["metric"], r["eval_length"]): r["value"] for r in old["rows"]
        }
        for r in new["rows"]:
            if r["metric"].startswith("accuracy_depth") or (
                run.kind == "probe" and r["task"] not in REPRODUCE_PROBE_TASKS
            ):
                continue  # small samples; a probe on a phase change (see above)
            ref = stored[(r["task"], r["metric"], r["eval_length"])]
            tol = REPRODUCE_TOLERANCE["loss" if "loss" in r["metric"] else "accuracy"]
            diff = r["value"] - ref
            out.append(
                {
                    "kind": run.kind,
                    "label": run.label,
                    "task": r["task"],
                    "metric": r["metric"],
                    "eval_length": r["eval_length"],
                    "stored": ref,
                    "recomputed": r["value"],
                    "difference": diff,
                    "tolerance": tol,
                    "ok": abs(diff) <= tol,
                }
            )
    return out


def _private_weight_cache() -> None:
    # train from scratch: a private, empty weight cache
    import tempfile

    os.environ["POSENC_CACHE_DIR"] = tempfile.mkdtemp(prefix="posenc-reproduce-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m posenc.study", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--name", default="length_generalization")
    parser.add_argument(
        "--preset",
        default="cpu",
        choices=sorted(PRESETS),
        help="which stored study (default: cpu, the one the book reads; gpu is an "
        "explicit choice, never made by the hardware alone)",
    )
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per process of --check (default 1)",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the grid and which runs are stored"
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="fail if the stored results do not cover the current "
        "grid (stale), and exit",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="fail if the stored results are stale, then rerun the "
        "reproduction sample and compare",
    )
    parser.add_argument(
        "--kinds",
        default="sweep,lm,probe",
        help="comma-separated kinds of cells to run (default: all)",
    )
    args = parser.parse_args(argv)
    preset = args.preset
    device = "cuda" if preset == "gpu" and torch.cuda.is_available() else "cpu"
    if args.list:
        corpus = study_corpus()
        stored = _stored(args.name, preset)
        try:
            runs = grid(preset, args.name)
        except KeyError:
            runs = sweep_runs(preset)
            print("(the sweep is incomplete: the main runs depend on its result)")
        for r in runs:
            key = r.key(corpus)
            print(f"{'stored ' if key in stored else 'missing'} {key}  {r.label}")
        return 0
    if args.verify or args.check:
        try:
            records = load_records(args.name, preset=preset)
        except StaleResultsError as err:
            print(err, file=sys.stderr)
            return 1
        print(
            f"the stored study {args.name!r} covers its grid: {len(records)} runs, "
            f"{sum(r['provenance']['wall_seconds'] for r in records):.0f} s of "
            "process time when computed"
        )
    if args.check:
        start = time.perf_counter()
        rows = reproduce(args.name, device=device, threads=args.threads)
        bad = [r for r in rows if not r["ok"]]
        worst = max(abs(r["difference"]) for r in rows)
        print(
            f"reproduced {len(rows)} stored values of {len(REPRODUCE_SAMPLE)} runs in "
            f"{time.perf_counter() - start:.0f} s; largest difference {worst:.2e}"
        )
        for r in bad:
            print(f"NOT REPRODUCED: {r}")
        return 1 if bad else 0
    if args.verify:
        return 0
    summary = run_study(
        args.name,
        preset=preset,
        workers=args.workers,
        device=device,
        kinds=tuple(args.kinds.split(",")),
    )
    print(
        f"study {args.name!r} ({preset}): {summary['runs']} runs in the grid; "
        f"{summary['wall_seconds']:.0f} s wall for the runs computed now; results in "
        f"{results_dir(args.name)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())


class Quotes:
    """The study's language-modelling results at one training length, quoted in prose:
    how the chapters put the study's intervals into sentences (every number computed).

    Args:
        df: :func:`load_results` (default: loaded, with ``strict``).
        train_length: which L (default: the cpu preset's).
        strict: passed to :func:`load_results` when ``df`` is not given.
    """

    def __init__(self, df=None, *, train_length: int | None = None, strict=True):
        df = load_results(strict=strict) if df is None else df
        self.train_length = train_length or PRESETS["cpu"]["train"]["seq_len"]
        self.lm = df[(df["kind"] == "lm") & (df["train_length"] == self.train_length)]
        self.seeds = self.lm["seed"].nunique()

    def values(self, scheme: str, multiple: int, metric: str = "loss_sliding"):
        """The loss of ``scheme`` at multiple·L, one value per seed (a Series)."""
        lm = self.lm
        rows = lm[
            (lm["scheme"] == scheme)
            & (lm["metric"] == metric)
            & (lm["eval_length"] == multiple * self.train_length)
        ]
        return rows.set_index("seed")["value"]

    def change(self, scheme, multiple, base=1, metric="loss_sliding") -> dict:
        """Loss at multiple·L minus loss at base·L, seed by seed: ``{"mean", "lower",
        "upper", "n", "resolved"}``."""
        diff = (
            self.values(scheme, multiple, metric) - self.values(scheme, base, metric)
        ).dropna()
        mean, lower, upper = mean_ci(diff)
        resolved = bool(lower > 0 or upper < 0)
        return {
            "mean": mean,
            "lower": lower,
            "upper": upper,
            "n": len(diff),
            "resolved": resolved,
        }

    def versus(self, a, b, multiple, metric="loss_sliding") -> dict:
        """Scheme ``a`` minus scheme ``b`` at multiple·L (:func:`paired_difference`)."""
        return paired_difference(
            self.lm, a, b, eval_length=multiple * self.train_length, metric=metric
        )

    @staticmethod
    def number(value: float, sign: bool = False) -> str:
        """Three decimals; a value that rounds to zero keeps one significant digit, so
        its sign shows."""
        if value != 0 and round(value, 3) == 0:
            return f"{value:{'+' if sign else ''}.1g}"
        return f"{round(value, 3) + 0.0:{'+' if sign else ''}.3f}"

    @classmethod
    def interval(cls, d: dict) -> str:
        """A signed difference and its interval: '+0.015 [+0.0003, +0.030]'."""
        return "{} [{}, {}]".format(
            *(cls.number(d[k], sign=True) for k in ("mean", "lower", "upper"))
        )

    @classmethod
    def size(cls, d: dict) -> str:
        """The size of a difference and its interval, without the sign."""
        sign = 1 if d["mean"] >= 0 else -1
        lower, upper = sorted((sign * d["lower"], sign * d["upper"]))
        return "{} [{}, {}]".format(
            *(cls.number(v) for v in (sign * d["mean"], lower, upper))
        )

    @classmethod
    def moves(cls, d: dict, subject="", up="rises", down="falls") -> str:
        """How a loss changes, in words: 'rises by …', 'falls by …', or 'changes by …
        (not resolved …)'."""
        subject = f" {subject}" if subject else ""
        if not d["resolved"]:
            return (
                f"changes{subject} by {cls.interval(d)} nats per byte "
                f"(not resolved with {d['n']} seeds)"
            )
        direction = up if d["mean"] > 0 else down
        return f"{direction}{subject} by {cls.size(d)} nats per byte"

    @staticmethod
    def names(labels) -> str:
        """'`a`', '`a` and `b`', '`a`, `b` and `c`'."""
        labels = [f"`{label}`" for label in labels]
        if len(labels) == 1:
            return labels[0]
        return ", ".join(labels[:-1]) + " and " + labels[-1]

    def model_note(self, config) -> str:
        """The study's model against a chapter's (``config``: a ModelConfig)."""
        ours, theirs = config.d_model // config.num_heads, PRESETS["cpu"]["model"]
        return (
            f"The study's model has {theirs['num_heads']} heads of width $d_h$ = "
            f"{theirs['d_model'] // theirs['num_heads']} (this chapter's: "
            f"{config.num_heads} of width {ours}) and is trained at $L$ = "
            f"{self.train_length} on the whole standard library with its packages, "
            f"{self.seeds} seeds per scheme. "
        )
