"""The study tier on a real model: SmolLM2-135M's loss by position on long texts.

Three experiments over the start of a standard-library text
(:data:`posenc.layers.pretrained.TEXTS`), scored token by token (single forward passes
with :func:`posenc.layers.pretrained.token_losses`, except for streaming):

* ``"context"``: T = 8192 (the trained length L) with the model's own RoPE, three
  consecutive chunks of each text: how the loss falls as the context grows;
* ``"extension"``: T = 16,384 = 2L with no scaling and with each of posenc's
  context-extension methods at factor s = 2 (:func:`posenc.scaling.rope_inv_freq`),
  with no fine-tuning;
* ``"streaming"``: T = 1024 read through a cache of 128 tokens (:data:`STREAMING`):
  window attention, StreamingLLM's 4 sinks + 124, and the sliding window with
  re-computation. T − 1 = 1023 losses: the last stored bucket holds 63 positions, the
  dense baseline's (the context run's first 1024 positions) 64.

One 16K forward takes minutes on a 2-core CPU, too long for every build, so the results
are stored, one JSON file per run, in ``src/posenc/results/smollm2/`` with their
provenance (configuration and its hash, versions, machine, date, seconds, and a
fingerprint of the tokens). ``python -m posenc.experiments.pretrained_study`` (part of
``make study``) computes what is missing; ``--verify`` fails when the stored files do
not cover the current grid; ``--check`` also reruns the short runs of :data:`CHECK_RUNS`
from scratch and requires their stored values back within :data:`CHECK_TOLERANCE`.
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
from . import store
from ..scaling import rope_inv_freq
from ..utils import cpu_float64

NAME = "smollm2"
VERSION = 1
BUCKET = 64  # positions per stored mean
FACTOR = 2.0
CHECK_TOLERANCE = 0.01  # nats, on every stored bucket mean of a CHECK_RUNS run


def methods(original: int = 8192, factor: float = FACTOR) -> dict[str, dict | None]:
    """The scalings compared at 2L: None is the model's own RoPE, unscaled. Llama 3's
    low_freq_factor 1 and high_freq_factor 4 are Llama 3.1's; YaRN's β are the
    paper's defaults."""
    common = {"factor": factor, "original_max_position_embeddings": original}
    return {
        "none": None,
        "linear": {"rope_type": "linear", "factor": factor},
        "ntk": {"rope_type": "ntk", "factor": factor},
        "dynamic": {"rope_type": "dynamic", **common},
        "yarn": {"rope_type": "yarn", **common},
        "llama3": {
            "rope_type": "llama3",
            **common,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
        },
    }


#: The ``"streaming"`` experiment's ways of reading a stream longer than the cache
#: (Xiao et al. 2024, Fig. 1): window attention over the last 128 tokens; StreamingLLM,
#: the first 4 tokens (the sinks) and the last 124, a cache of the same size; and the
#: sliding window with re-computation (each token from its last 128, encoded afresh).
STREAMING = {
    "window": {"sink_tokens": 0, "window": 128},
    "sinks": {"sink_tokens": 4, "window": 124},
    "recompute": {"window": 128},
}
#: Tokens of each text the streaming experiment reads.
STREAM_TOKENS = 1024


@dataclasses.dataclass(frozen=True)
class RealRun:
    """One forward pass of SmolLM2 over ``tokens`` tokens of a text.

    Attributes:
        experiment: ``"context"``, ``"extension"``, ``"streaming"`` or ``"check"``.
        text: ``"prose"`` or ``"code"``.
        tokens: T, the sequence length.
        chunk: which consecutive block of T tokens of the text (0 = its start).
        method: a key of :func:`methods`, or of :data:`STREAMING` for the streaming
            experiment.
    """

    experiment: str
    text: str
    tokens: int
    chunk: int
    method: str

    def config(self) -> dict:
        spec = pretrained.MODELS["smollm2"]
        config = {
            **dataclasses.asdict(self),
            "scaling": methods().get(self.method),
            "model": spec.requirement,
            "bucket": BUCKET,
            "version": VERSION,
        }
        if self.experiment == "streaming":
            config["streaming"] = STREAMING[self.method]
        return config

    def key(self) -> str:
        blob = json.dumps(self.config(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def label(self) -> str:
        return (
            f"{self.experiment} {self.text} T={self.tokens} chunk {self.chunk} "
            f"{self.method}"
        )


def grid() -> list[RealRun]:
    """Every stored run."""
    runs = [
        RealRun("context", text, 8192, chunk, "none")
        for text in pretrained.TEXTS
        for chunk in range(3)
    ]
    runs += [
        RealRun("extension", text, 16384, 0, method)
        for text in pretrained.TEXTS
        for method in methods()
    ]
    runs += [
        RealRun("streaming", text, STREAM_TOKENS, 0, method)
        for text in pretrained.TEXTS
        for method in STREAMING
    ]
    return list(CHECK_RUNS) + runs


# the short runs that --check recomputes: 1024 tokens, the unscaled model and YaRN
CHECK_RUNS = (
    RealRun("check", "prose", 1024, 0, "none"),
    RealRun("check", "prose", 1024, 0, "yarn"),
)


def losses(model, ids: torch.Tensor, method: str) -> torch.Tensor:
    """Per-position losses (T − 1,) of one sequence with a scaling method (a key of
    :func:`methods`): :func:`scaled_losses` with its ``rope_parameters``."""
    return scaled_losses(model, ids, methods()[method])


def scaled_losses(model, ids: torch.Tensor, scaling: dict | None) -> torch.Tensor:
    """Per-position losses (T − 1,) of one sequence with the frequencies of
    ``scaling`` (a ``rope_parameters`` dict, None for the model's own) from
    :func:`posenc.scaling.rope_inv_freq` for the sequence's length, rotated by
    :func:`posenc.layers.pretrained.swap_rope`."""
    config = pretrained.rope_config(model)
    inv_freq, factor = rope_inv_freq(
        config["rotary_dim"], config["base"], scaling, seq_len=len(ids)
    )
    with pretrained.swap_rope(model, inv_freq=inv_freq, attention_factor=factor):
        return pretrained.token_losses(model, ids)


def run_losses(model, ids: torch.Tensor, run: RealRun) -> torch.Tensor:
    """Per-position losses (T − 1,) of one run: :func:`losses` with its scaling, or
    for the streaming experiment :func:`posenc.layers.pretrained.streaming_token_losses`
    / :func:`posenc.layers.pretrained.window_recompute_token_losses` with its
    :data:`STREAMING` settings and the model's own RoPE."""
    if run.experiment != "streaming":
        return losses(model, ids, run.method)
    settings = STREAMING[run.method]
    if run.method == "recompute":
        return pretrained.window_recompute_token_losses(model, ids, **settings)
    return pretrained.streaming_token_losses(model, ids, **settings)


def bucket_means(values: torch.Tensor, bucket: int = BUCKET) -> list[float]:
    """Means over consecutive groups of ``bucket`` positions (the last may be
    shorter)."""
    return [
        float(cpu_float64(values[i : i + bucket]).mean())
        for i in range(0, len(values), bucket)
    ]


def _tokens(tokenizer, text: str, cache: dict) -> torch.Tensor:
    if text not in cache:
        # the first 400,000 characters hold more than 3 × 16384 tokens of either text
        cache[text] = pretrained.text_tokens(
            tokenizer, pretrained.TEXTS[text]()[:400_000], max_tokens=3 * 16384
        )
    return cache[text]


def execute(run: RealRun, model, tokenizer, cache: dict | None = None) -> dict:
    """Run one forward pass and return its record (config, key, results,
    provenance)."""
    from importlib.metadata import version

    cache = {} if cache is None else cache
    ids = _tokens(tokenizer, run.text, cache)
    ids = ids[run.chunk * run.tokens : (run.chunk + 1) * run.tokens]
    if len(ids) < run.tokens:
        raise ValueError(f"{run.text} has fewer than {run.tokens} tokens for {run}")
    start = time.perf_counter()
    values = run_losses(model, ids, run)
    seconds = time.perf_counter() - start
    return {
        "key": run.key(),
        "config": run.config(),
        "results": {
            "mean_loss": float(cpu_float64(values).mean()),
            "bucket_loss": bucket_means(values),
        },
        "provenance": {
            **store.provenance(),
            "transformers": version("transformers"),
            "gguf": version("gguf"),
            "tokens_fingerprint": pretrained.fingerprint(ids),
            "seconds": round(seconds, 1),
        },
    }


#: The command that computes the study, named by the staleness message.
COMMAND = "python -m posenc.experiments.pretrained_study"

#: The stored study's runner (:class:`posenc.experiments.store.RealModelStudy`).
STUDY = store.RealModelStudy(
    name=NAME,
    grid=grid,
    key=RealRun.key,
    execute=execute,
    load_model=functools.partial(pretrained.load, "smollm2"),
    check_runs=CHECK_RUNS,
    tolerance=CHECK_TOLERANCE,
    command=COMMAND,
    study="real-model study",
    progress=lambda record: f": loss {record['results']['mean_loss']:.3f}",
    compare_tokens=True,
)


def run_study(*, threads: int | None = None) -> int:
    """Compute the missing runs (resumable: one file each) and delete files that left
    the grid (:meth:`posenc.experiments.store.RealModelStudy.compute_missing`).

    Args:
        threads: torch threads to use (default: leave torch's setting).

    Returns:
        How many runs were computed.
    """
    return STUDY.compute_missing(threads=threads)


def load_records(*, strict: bool = True) -> list[dict]:
    """The stored records of the current grid.

    Raises:
        posenc.experiments.store.StaleResultsError: with ``strict``, when a run of the
            grid has no stored file (a changed configuration, method or model
            version); the message names the runs and the command.
    """
    return STUDY.records(strict=strict)


def load_real_model_results(*, strict: bool = True):
    """The stored results as a long DataFrame: one row per run and bucket, columns
    ``experiment, text, tokens, chunk, method, position, loss`` (position = the first
    position of the bucket of :data:`BUCKET` positions; the loss of predicting token
    position + 1)."""
    import pandas as pd

    rows = []
    for record in load_records(strict=strict):
        c = record["config"]
        for b, value in enumerate(record["results"]["bucket_loss"]):
            rows.append(
                {
                    **{k: c[k] for k in ("experiment", "text", "tokens", "chunk")},
                    "method": c["method"],
                    "position": b * c["bucket"],
                    "loss": value,
                }
            )
    return pd.DataFrame(rows)


def range_perplexity(
    df, *, text: str, method: str, start: int, stop: int, experiment: str = "extension"
) -> float:
    """Perplexity over the predicted positions ``start`` … ``stop − 1`` of stored runs:
    the exponential of the mean loss per token, every bucket weighted by the positions
    it holds (the last bucket of a run holds one position less: the last token predicts
    nothing), averaged over the runs' chunks alike.

    Args:
        df: :func:`load_real_model_results`. text: ``"prose"`` or ``"code"``.
            method: a key of :func:`methods` (``"none"``, ``"linear"``, ``"yarn"``,
            ...). start, stop: a range of positions, multiples of :data:`BUCKET`.
            experiment: which runs.

    Raises:
        ValueError: no stored bucket in the range, or a bound not a multiple of
            :data:`BUCKET`.
    """
    import math

    if start % BUCKET or stop % BUCKET:
        raise ValueError(
            f"start and stop must be multiples of {BUCKET}, got {start}, {stop}"
        )
    rows = df[
        (df["experiment"] == experiment)
        & (df["text"] == text)
        & (df["method"] == method)
        & (df["position"] >= start)
        & (df["position"] < stop)
    ]
    if rows.empty:
        raise ValueError(
            f"no stored {experiment} run of {text!r} with method {method!r} covers "
            f"positions {start} … {stop - 1}"
        )
    weights = [
        min(BUCKET, tokens - 1 - position)
        for tokens, position in zip(rows["tokens"], rows["position"])
    ]
    loss = sum(w * v for w, v in zip(weights, rows["loss"])) / sum(weights)
    return math.exp(loss)


def stored_provenance() -> list[dict]:
    """Each stored run's label and provenance (versions, machine, date, seconds)."""
    return [
        {
            "run": RealRun(**{k: r["config"][k] for k in _FIELDS}).label,
            **r["provenance"],
        }
        for r in load_records(strict=False)
    ]


_FIELDS = tuple(f.name for f in dataclasses.fields(RealRun))


def reproduce(model=None, tokenizer=None, *, threads: int | None = None) -> list[dict]:
    """Rerun :data:`CHECK_RUNS` from scratch and compare every bucket with the stored
    value; a run measured on other tokens (another Python's ``pydoc_data``) is
    reported, not compared.

    Args:
        model, tokenizer: SmolLM2 as :func:`posenc.layers.pretrained.load` returns it
            (loaded here when None).
        threads: torch threads to use (default: leave torch's setting).

    Returns:
        One dict per run: ``run``, ``same_tokens``, ``difference`` (the largest
        absolute difference of a bucket mean, nats) and ``ok`` (within
        :data:`CHECK_TOLERANCE`, or not comparable).
    """
    return STUDY.reproduce(model, tokenizer, threads=threads)


def main(argv: list[str] | None = None) -> int:
    """``python -m posenc.experiments.pretrained_study``: compute the stored study's
    missing runs, or ``--list``, ``--verify`` or ``--check`` it
    (:mod:`posenc.experiments.store`)."""
    return STUDY.main(
        argv,
        description=__doc__.split("\n\n")[0]
        + " Without options: compute the stored study's missing runs "
        "(src/posenc/results/smollm2/, make study).",
        check="two 1024-token runs (no scaling, YaRN)",
        options=[
            (
                "--threads",
                {
                    "type": int,
                    "default": None,
                    "help": "torch threads (default: torch's own setting)",
                },
            )
        ],
    )


if __name__ == "__main__":
    sys.exit(main())
