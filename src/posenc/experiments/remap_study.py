"""The study tier on a real model, second part: SmolLM2-135M at twice its context with
the attention-level methods (SelfExtend, Dual Chunk Attention, ReRoPE: the registry's
``"attention"`` namespace) beside the frequency methods of
:mod:`posenc.experiments.pretrained_study`, and a passkey probe for both.

Two experiments, each run one forward pass of T tokens:

* ``"extension"``: T = 16,384 = 2L tokens of the prose and code texts of
  :mod:`posenc.experiments.pretrained_study` (the same tokens), the loss by position in
  buckets of :data:`posenc.experiments.pretrained_study.BUCKET`, for each method of
  :func:`attention_methods` (the frequency methods' runs are already stored there), and
  T = 32,768 = 4L for YaRN and SelfExtend set for 4L (:data:`LONG_METHODS`);
* ``"passkey"``: a key of five digits hidden at a depth of 10 %, 50 % or 90 % of T
  tokens of filler (Mohtashami & Jaggi 2023, §4.2's format), then the question; scored
  by teacher forcing: the log-probability of the key's tokens after the question, and
  whether each of them is the model's most likely next token (no generation).

One 16K pass takes minutes on a CPU (an attention-level method several times a plain
pass), so the results are stored, one JSON file per run, in
``src/posenc/results/smollm2_remap/`` with their provenance (the device among it: the
stored 16K runs were computed on one H200 in 262 s, ``--device cuda``; the 4L runs and
the check run on a CPU, one thread each, SelfExtend's through the fused CPU path of
:mod:`posenc.layers.remapped_attention`). ``python -m posenc.experiments.remap_study``
computes what is missing (resumable), ``--verify`` fails when the stored files do not
cover the grid, and ``--check`` reruns :data:`CHECK_RUNS` (1,024 tokens) from scratch
on the CPU.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import sys
import time

import torch

from ..layers import pretrained
from ..schemes import build_scheme
from ..utils import cpu_float64
from . import pretrained_study as ps
from . import store

NAME = "smollm2_remap"
VERSION = 1
LENGTH = 16384
#: The passkey control's lengths, inside the trained 8,192: can the unscaled model
#: retrieve the key at all when every distance is one it was trained on, and how much
#: does a longer haystack cost it (L/2 and L)?
CONTROL_LENGTHS = (4096, 8192)
CHECK_TOLERANCE = ps.CHECK_TOLERANCE
DEPTHS = (0.1, 0.5, 0.9)
KEYS = 5
FILLER = (
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and "
    "back again. "
)


def attention_methods(original: int = 8192) -> dict[str, dict]:
    """The attention-level methods at 2L, each ``{"name": ..., **settings}`` for
    :func:`posenc.schemes.build_scheme` (namespace ``"attention"``):

    * SelfExtend with G = 4 and W = L/4: its largest distance at T = 2L stays below L
      (:func:`posenc.remap.self_extend_max_length`);
    * DCA with ChunkLlama's defaults for a pretraining length of L
      (``chunk_size`` 3L/4, ``local_window`` L/8 in its code: s = 5L/8, c = 3L/4 + 1,
      w = L/8 + 1 in the paper's terms; tests/test_remap.py);
    * ReRoPE with bojone's window ratio (512 for a 4,096-token LLaMA): W = L/8.
    """
    code_chunk, code_window = original * 3 // 4, original // 8
    return {
        "self_extend": {
            "name": "self_extend",
            "group_size": 4,
            "window_size": original // 4,
        },
        "dual_chunk": {
            "name": "dual_chunk",
            "chunk_size": code_chunk - code_window,
            "pretraining_length": code_chunk + 1,
            "local_window": code_window + 1,
        },
        "rerope": {"name": "rerope", "window": original // 8},
    }


#: 4L = 32,768 tokens, for the best method of each kind at 2L, set for 4L (the chapter
#: asserts both choices against the 2L table):
#:
#: * frequencies: YaRN (lowest perplexity past L on the prose text, tied within 0.2 %
#:   with NTK on code) with factor 4 instead of 2;
#: * remapping: SelfExtend (lowest past L on prose, tied within 0.2 % with DCA on code)
#:   with the group size doubled as T doubles, G = 8 (W stays L/4): its largest distance
#:   at 4L stays below L (:func:`posenc.remap.self_extend_max_length`: 51,200 tokens).
LONG_LENGTH = 4 * 8192
LONG_METHODS = {
    "yarn_4l": {**ps.methods()["yarn"], "factor": 4.0},
    "self_extend_4l": {**attention_methods()["self_extend"], "group_size": 8},
}

#: The check's method: SelfExtend with a window short enough to act within 1,024 tokens.
CHECK_METHOD = {"name": "self_extend", "group_size": 4, "window_size": 256}


def method_settings(method: str) -> dict | None:
    """The settings of a method name: an attention-level method's dict, a frequency
    method's scaling (:func:`posenc.experiments.pretrained_study.methods`, None for the
    unscaled model), a method of :data:`LONG_METHODS`, or :data:`CHECK_METHOD` for
    ``"self_extend_check"``."""
    if method == "self_extend_check":
        return CHECK_METHOD
    methods = {**ps.methods(), **attention_methods(), **LONG_METHODS}
    if method not in methods:
        raise ValueError(f"unknown method {method!r}; known: {sorted(methods)}")
    return methods[method]


def passkeys(count: int = KEYS, seed: int = 0) -> list[int]:
    """``count`` five-digit keys, the same on every machine."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(10_000, 100_000, (count,), generator=g).tolist()


def passkey_ids(
    tokenizer, tokens: int, depth: float, key: int
) -> tuple[torch.Tensor, int]:
    """The passkey prompt of exactly ``tokens`` tokens: filler, the key's sentence at
    ``depth`` (a fraction of the filler), filler, the question and the answer.

    Returns:
        ``(ids, answer_length)``: int64 (tokens,), the answer's tokens last.

    Raises:
        ValueError: ``depth`` outside [0, 1], or too few tokens for the sentences.
    """
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be a fraction in [0, 1], got {depth}")
    encode = lambda s: pretrained.text_tokens(tokenizer, s)  # noqa: E731
    needle = encode(f" The pass key is {key}. Remember it. {key} is the pass key.")
    question = encode(" What is the pass key? The pass key is")
    answer = encode(f" {key}.")
    budget = tokens - len(needle) - len(question) - len(answer)
    if budget < 1:
        raise ValueError(f"{tokens} tokens cannot hold the passkey prompt")
    filler = encode(FILLER * (budget // 20 + 2))[:budget]
    cut = round(depth * budget)
    ids = torch.cat([filler[:cut], needle, filler[cut:], question, answer])
    return ids, len(answer)


@dataclasses.dataclass(frozen=True)
class RemapRun:
    """One forward pass of SmolLM2.

    Attributes:
        experiment: ``"extension"``, ``"passkey"`` or ``"check"``.
        text: ``"prose"`` or ``"code"`` (``"passkey"`` for the probe).
        tokens: T.
        method: a method name of :func:`method_settings`.
        depth: the key's depth (passkey only).
        key: which of :func:`passkeys` (passkey only).
    """

    experiment: str
    text: str
    tokens: int
    method: str
    depth: float | None = None
    key: int | None = None

    def config(self) -> dict:
        return {
            **dataclasses.asdict(self),
            "settings": method_settings(self.method),
            "model": pretrained.MODELS["smollm2"].requirement,
            "bucket": ps.BUCKET,
            "version": VERSION,
        }

    def key_hash(self) -> str:
        blob = json.dumps(self.config(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def label(self) -> str:
        where = "" if self.depth is None else f" depth {self.depth:.0%} key {self.key}"
        return f"{self.experiment} {self.text} T={self.tokens} {self.method}{where}"


#: The short run that --check recomputes.
CHECK_RUNS = (RemapRun("check", "prose", 1024, "self_extend_check"),)


def grid() -> list[RemapRun]:
    """Every run: the extension runs of the attention-level methods, then the passkey
    probe for every method (frequency and attention-level) at 2L, then its control:
    the unscaled model at each of :data:`CONTROL_LENGTHS`, then the method of
    :data:`LONG_METHODS` on both texts at 4L."""
    runs = [
        RemapRun("extension", text, LENGTH, method)
        for method in attention_methods()
        for text in pretrained.TEXTS
    ]
    runs += [
        RemapRun("passkey", "passkey", LENGTH, method, depth, key)
        for method in (*ps.methods(), *attention_methods())
        for depth in DEPTHS
        for key in range(KEYS)
    ]
    runs += [
        RemapRun("passkey", "passkey", tokens, "none", depth, key)
        for tokens in CONTROL_LENGTHS
        for depth in DEPTHS
        for key in range(KEYS)
    ]
    runs += [
        RemapRun("extension", text, LONG_LENGTH, method)
        for method in LONG_METHODS
        for text in pretrained.TEXTS
    ]
    return list(CHECK_RUNS) + runs


def method_losses(model, ids: torch.Tensor, method: str) -> torch.Tensor:
    """Per-position losses (T − 1,) of one sequence under a method: an attention-level
    method through :func:`posenc.layers.pretrained.swap_rope`'s ``attention``, a
    frequency method as :func:`posenc.experiments.pretrained_study.scaled_losses`."""
    settings = method_settings(method)
    if settings is None or "name" not in settings:
        return ps.scaled_losses(model, ids, settings)
    config = pretrained.rope_config(model)
    options = {k: v for k, v in settings.items() if k != "name"}
    scheme = build_scheme(
        settings["name"],
        namespace="attention",
        d_model=config["num_heads"] * config["head_dim"],
        num_heads=config["num_heads"],
        base=config["base"],
        **options,
    )
    with pretrained.swap_rope(model, attention=scheme):
        return pretrained.token_losses(model, ids)


def _run_ids(run: RemapRun, tokenizer, cache: dict) -> tuple[torch.Tensor, int]:
    if run.experiment == "passkey":
        return passkey_ids(tokenizer, run.tokens, run.depth, passkeys()[run.key])
    ids = ps._tokens(tokenizer, run.text, cache)[: run.tokens]
    if len(ids) < run.tokens:
        raise ValueError(f"{run.text} has fewer than {run.tokens} tokens")
    return ids, 0


def execute(run: RemapRun, model, tokenizer, cache: dict | None = None) -> dict:
    """Run one forward pass; return its record (config, key, results, provenance)."""
    from importlib.metadata import version

    ids, answer = _run_ids(run, tokenizer, {} if cache is None else cache)
    start = time.perf_counter()
    with torch.no_grad():
        values = method_losses(model, ids, run.method)
    seconds = time.perf_counter() - start
    if run.experiment == "passkey":
        answer_losses = cpu_float64(values[-answer:])  # the key's tokens, forced
        results = {
            "answer_logprob": -float(answer_losses.sum()),
            "answer_losses": answer_losses.tolist(),
        }
    else:
        results = {
            "mean_loss": float(cpu_float64(values).mean()),
            "bucket_loss": ps.bucket_means(values),
        }
    return {
        "key": run.key_hash(),
        "config": run.config(),
        "results": results,
        "provenance": {
            **store.provenance(),
            "transformers": version("transformers"),
            "tokens_fingerprint": pretrained.fingerprint(ids),
            "seconds": round(seconds, 1),
            "device": _device_name(model),
        },
    }


def _device_name(model) -> str:
    device = next(model.parameters()).device
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return f"{device.type}, torch {torch.__version__}"


COMMAND = "python -m posenc.experiments.remap_study"

#: The stored study's runner (:class:`posenc.experiments.store.RealModelStudy`).
STUDY = store.RealModelStudy(
    name=NAME,
    grid=grid,
    key=RemapRun.key_hash,
    execute=execute,
    load_model=functools.partial(pretrained.load, "smollm2"),
    check_runs=CHECK_RUNS,
    tolerance=CHECK_TOLERANCE,
    command=COMMAND,
    study="real-model remapping study",
    title="remapping study",
)


def run_study(
    *, threads: int | None = None, limit: int | None = None, device: str = "cpu"
) -> int:
    """Compute the missing runs in grid order (resumable: one file each), at most
    ``limit`` of them, with the model on ``device``
    (:meth:`posenc.experiments.store.RealModelStudy.compute_missing`).

    Returns:
        How many runs were computed.
    """
    return STUDY.compute_missing(threads=threads, limit=limit, device=device)


def load_records(*, strict: bool = True) -> list[dict]:
    """The stored records of the current grid.

    Raises:
        posenc.experiments.store.StaleResultsError: with ``strict``, when a run of the
            grid has no stored file; the message names the runs and the command.
    """
    return STUDY.records(strict=strict)


def extension_table(*, strict: bool = True):
    """Perplexity of SmolLM2 at 2L by position range, text and method: the stored
    attention-level runs here beside the frequency methods of
    :mod:`posenc.experiments.pretrained_study`.

    Returns:
        A DataFrame indexed by method, columns ``(text, range)`` with ranges
        ``"[0, L)"`` and ``"[L, 2L)"``, L = 8,192.
    """
    import pandas as pd

    half = LENGTH // 2
    stored = ps.load_real_model_results(strict=strict)
    mine = _extension_frame(LENGTH, strict=strict)
    both = pd.concat([stored, mine], ignore_index=True)
    ranges = (("[0, L)", 0, half), ("[L, 2L)", half, LENGTH))
    return _range_table(both, (*ps.methods(), *attention_methods()), ranges)


def _range_table(frame, methods, ranges):
    """Perplexity per method (rows) and ``(text, range label)`` (columns) of the runs
    in ``frame`` (:func:`posenc.experiments.pretrained_study.range_perplexity`);
    ``ranges`` are ``(label, start, stop)``."""
    import pandas as pd

    table = {
        method: {
            (text, label): ps.range_perplexity(
                frame, text=text, method=method, start=start, stop=stop
            )
            for text in pretrained.TEXTS
            for label, start, stop in ranges
        }
        for method in methods
    }
    return pd.DataFrame.from_dict(table, orient="index")


def _extension_frame(tokens: int, *, strict: bool = True):
    """The stored extension runs of ``tokens`` tokens, one row per bucket, in the
    columns of :func:`posenc.experiments.pretrained_study.load_real_model_results`."""
    import pandas as pd

    rows = [
        {"experiment": "extension", "text": c["text"], "tokens": tokens, "chunk": 0,
         "method": c["method"], "position": b * ps.BUCKET, "loss": value}
        for record in load_records(strict=strict)
        for c in [record["config"]]
        if c["experiment"] == "extension" and c["tokens"] == tokens
        for b, value in enumerate(record["results"]["bucket_loss"])
    ]
    return pd.DataFrame(rows)


def long_table(*, strict: bool = True):
    """Perplexity of SmolLM2 at 4L = 32,768 tokens (:data:`LONG_METHODS`) by position
    range and text.

    Returns:
        A DataFrame indexed by method, columns ``(text, range)`` with ranges
        ``"[0, L)"``, ``"[L, 2L)"``, ``"[2L, 3L)"`` and ``"[3L, 4L)"``, L = 8,192.
    """
    L = LONG_LENGTH // 4
    labels = ("[0, L)", "[L, 2L)", "[2L, 3L)", "[3L, 4L)")
    ranges = [(label, k * L, (k + 1) * L) for k, label in enumerate(labels)]
    frame = _extension_frame(LONG_LENGTH, strict=strict)
    return _range_table(frame, LONG_METHODS, ranges)


def relative_time(*, strict: bool = True) -> tuple[dict[str, float], set[str]]:
    """The seconds of a 2L passkey pass per method, as a mean over its stored runs,
    relative to the unscaled model's, and the devices those runs were timed on.

    Returns:
        ``({method: mean seconds / unscaled mean seconds}, {device})``.
    """
    seconds: dict[str, list[float]] = {}
    devices = set()
    for record in load_records(strict=strict):
        c = record["config"]
        if c["experiment"] == "passkey" and c["tokens"] == LENGTH:
            seconds.setdefault(c["method"], []).append(record["provenance"]["seconds"])
            devices.add(record["provenance"]["device"])
    base = sum(seconds["none"]) / len(seconds["none"])
    return {m: sum(v) / len(v) / base for m, v in seconds.items()}, devices


def passkey_table(*, strict: bool = True):
    """The passkey probe: per method, length and depth, the mean over the keys of the
    probability of the whole answer (its tokens forced) and the smallest and largest.

    Returns:
        A long DataFrame: ``method, tokens, depth, mean_p, min_p, max_p, keys``
        (tokens :data:`LENGTH` for every method, :data:`CONTROL_LENGTHS` for the
        control).
    """
    import math

    import pandas as pd

    groups: dict = {}
    for record in load_records(strict=strict):
        c = record["config"]
        if c["experiment"] == "passkey":
            p = math.exp(record["results"]["answer_logprob"])
            groups.setdefault((c["method"], c["tokens"], c["depth"]), []).append(p)
    return pd.DataFrame(
        [
            {"method": m, "tokens": t, "depth": d, "mean_p": sum(v) / len(v),
             "min_p": min(v), "max_p": max(v), "keys": len(v)}
            for (m, t, d), v in groups.items()
        ]
    )


def reproduce(model=None, tokenizer=None) -> list[dict]:
    """Rerun :data:`CHECK_RUNS` from scratch on the CPU and compare every bucket with
    the stored value (:data:`CHECK_TOLERANCE` nats).

    Returns:
        One dict per run: ``run``, ``difference`` (the largest absolute difference
        of a bucket mean, nats) and ``ok``.
    """
    return STUDY.reproduce(model, tokenizer)


def main(argv: list[str] | None = None) -> int:
    """``python -m posenc.experiments.remap_study``: compute the missing runs
    (``--device cuda`` for a GPU, ``--limit N``), or ``--list``, ``--verify`` or
    ``--check`` them (:mod:`posenc.experiments.store`)."""
    return STUDY.main(
        argv,
        description=__doc__.split("\n\n")[0],
        check="one 1024-token SelfExtend run on the CPU",
        options=[
            ("--limit", {"type": int, "default": None, "help": "at most N runs"}),
            ("--threads", {"type": int, "default": None, "help": "torch threads"}),
            ("--device", {"default": "cpu", "help": "where the model runs"}),
        ],
    )


if __name__ == "__main__":
    sys.exit(main())
