"""The book's standard extrapolation experiment, shared by every chapter.

Every chapter trains the tiny LM with *the same* configuration and only the scheme
changes, so the trained weights are cached once (:mod:`posenc.layers.train`) and
chapters can be compared. The only knob is ``scale``: ``"small"`` runs in about half a
minute per scheme on a 2-core CPU and its weights ship with posenc; ``"large"`` is meant
for a GPU and is trained where it runs. It is an explicit opt-in, never switched on by
the hardware alone: notebooks read it with :func:`book_scale`, from the environment
variable ``POSENC_SCALE``::

    SCALE = posenc.experiments.book_scale()   # "small" unless POSENC_SCALE=large
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace

from .._checks import check_int
from ..layers.data import Corpus
from ..layers.model import ModelConfig
from ..schemes import chapter_schemes
from ..layers.train import (
    TrainConfig,
    TrainResult,
    cache_dir,
    cache_key,
    perplexity_by_length,
    shipped_path,
    train,
)

SCALES = {
    "small": {
        "model": {"d_model": 64, "num_heads": 4, "num_layers": 2},
        "train": {"seq_len": 64, "batch_size": 32, "steps": 1000},
    },
    "large": {
        "model": {"d_model": 256, "num_heads": 8, "num_layers": 4},
        "train": {
            "seq_len": 256,
            "batch_size": 64,
            "steps": 3000,
            "lr": 1e-3,
            "warmup_steps": 200,
        },
    },
}
#: The environment variable that opts into a scale (:func:`book_scale`).
SCALE_ENV = "POSENC_SCALE"


def book_scale() -> str:
    """The experiment scale the chapters use: ``$POSENC_SCALE`` if set, else
    ``"small"``. A GPU does not switch it on by itself: the large scale trains every
    model where it runs (minutes each on a T4), so it is the reader's choice.

    Raises:
        ValueError: ``POSENC_SCALE`` names no scale of :data:`SCALES`.
    """
    scale = os.environ.get(SCALE_ENV, "small") or "small"
    if scale not in SCALES:
        raise ValueError(
            f"{SCALE_ENV}={scale!r}: must be one of {', '.join(map(repr, SCALES))}"
        )
    return scale


def run_key(run: BookRun, corpus, scale: str) -> str:
    """The cache key of the weights ``run`` produces (for a fine-tune, of the fine-tuned
    weights)."""
    (model_cfg, train_cfg), tuned = run.configs(scale)
    key = cache_key(model_cfg, train_cfg, corpus)
    return key if tuned is None else cache_key(*tuned, corpus, init_key=key)


def untrained_runs(runs: list[BookRun], corpus, scale: str) -> list[BookRun]:
    """The runs not trained yet: their weights are neither in
    :func:`posenc.layers.train.cache_dir` nor among the weights that ship with posenc.
    (:func:`posenc.experiments.store.missing_runs` is another thing: the runs of a
    study that have no stored result.)"""
    missing = []
    for r in runs:
        key = run_key(r, corpus, scale)
        if not (cache_dir() / f"{key}.pt").exists() and not shipped_path(key).exists():
            missing.append(r)
    return missing



def training_plan(scale: str | None = None) -> str:
    """What the chapters will have to train at ``scale`` (default :func:`book_scale`),
    in one sentence a chapter prints before it loads a model: nothing at the small
    scale (its weights ship with posenc), else how many of the book's runs are
    missing and how long each is.

    Raises:
        ValueError: an unknown scale.
    """
    from ..layers.data import load_stdlib_corpus

    scale = book_scale() if scale is None else scale
    if scale not in SCALES:
        raise ValueError(
            f"scale must be one of {', '.join(map(repr, SCALES))}; got {scale!r}"
        )
    runs = book_runs(scale)
    missing = untrained_runs(runs, load_stdlib_corpus(), scale)
    if not missing:
        return (
            f"scale {scale!r}: every model the chapters load ships with posenc or is "
            "cached; nothing will be trained."
        )
    train = TrainConfig(**SCALES[scale]["train"])
    return (
        f"scale {scale!r}: {len(missing)} of the book's {len(runs)} models are neither "
        "shipped nor cached, so each chapter trains the ones it loads before using "
        f"them: {train.steps} steps of {train.batch_size} × {train.seq_len} bytes each "
        "(minutes on a GPU, much longer on a CPU; not measured here)."
    )


#: Evaluation lengths, as multiples of the training length.
LENGTH_MULTIPLES = (1, 2, 4, 8)
#: A learned table covers this many training lengths (so 8× is past its end).
LEARNED_TABLE_MULTIPLE = 4
#: Validation bytes scored at every length.
EVAL_TOKENS = 32768


def experiment_config(
    scheme: str, *, scale: str = "small", **scheme_options
) -> tuple[ModelConfig, TrainConfig]:
    """The model and training configuration of the standard experiment for ``scheme``.

    Args:
        scheme: a registered scheme name.
        scale: ``"small"`` (CPU) or ``"large"`` (GPU).
        **scheme_options: options of the scheme; ``"learned"`` gets
            ``max_len = LEARNED_TABLE_MULTIPLE · seq_len`` unless given.

    Raises:
        ValueError: unknown scale or scheme.
    """
    if scale not in SCALES:
        raise ValueError(
            f"scale must be one of {', '.join(map(repr, SCALES))}; got {scale!r}"
        )
    sizes = SCALES[scale]
    train_cfg = TrainConfig(**sizes["train"])
    if scheme == "learned":
        scheme_options.setdefault("max_len", LEARNED_TABLE_MULTIPLE * train_cfg.seq_len)
    model_cfg = ModelConfig(
        scheme=scheme, scheme_options=scheme_options, **sizes["model"]
    )
    return model_cfg, train_cfg


def train_scheme(
    scheme: str,
    corpus: Corpus | None = None,
    *,
    scale: str = "small",
    device=None,
    **scheme_options,
) -> TrainResult:
    """Train (or load from the cache) the standard model for ``scheme``."""
    model_cfg, train_cfg = experiment_config(scheme, scale=scale, **scheme_options)
    return train(model_cfg, train_cfg, corpus, device=device)


def extrapolation(
    result: TrainResult, corpus: Corpus, *, multiples=LENGTH_MULTIPLES, model=None
) -> dict[int, float]:
    """``{evaluation length: validation perplexity}`` at the given multiples of the
    training length, all scored on the same first :data:`EVAL_TOKENS` validation bytes
    (:func:`posenc.layers.train.perplexity_by_length`).

    Lengths past a scheme's ``max_positions`` (the end of a learned table) cannot be
    processed at all and are left out of the result; :func:`perplexity_table` marks them
    "cannot run".

    ``model`` replaces ``result.model`` for the scoring (e.g. the same weights with a
    RoPE scaling, :meth:`posenc.layers.model.TinyLM.with_scheme_options`); the lengths
    stay multiples of the training length of ``result``.
    """
    model = result.model if model is None else model
    train_len = result.train_config.seq_len
    limit = model.max_positions
    lengths = [
        k * train_len for k in multiples if limit is None or k * train_len <= limit
    ]
    return perplexity_by_length(model, corpus.val, lengths, max_tokens=EVAL_TOKENS)


#: Fine-tuning at a longer length (context extension): steps per scale. Tokens per step
#: stay those of the base training (batch size shrinks as the length grows).
FINE_TUNE_STEPS = {"small": 150, "large": 300}


def scaling_methods(train_len: int, factor: float) -> dict[str, dict | None]:
    """The context-extension methods the book compares, as ``scaling`` dicts for the
    "rope" scheme of a model trained at ``train_len`` and extended ``factor`` times (see
    :mod:`posenc.scaling`). Llama 3's low/high frequency factors are Meta's (1 and
    4)."""
    original = {"original_max_position_embeddings": train_len}
    return {
        "plain RoPE": None,
        "linear (PI)": {"rope_type": "linear", "factor": factor},
        "NTK-aware": {"rope_type": "ntk", "factor": factor},
        "dynamic NTK": {"rope_type": "dynamic", "factor": factor, **original},
        "YaRN": {"rope_type": "yarn", "factor": factor, **original},
        "Llama 3": {
            "rope_type": "llama3",
            "factor": factor,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            **original,
        },
    }


def fine_tune_config(
    result_or_config, *, seq_len: int, scale: str = "small", **scheme_options
) -> tuple[ModelConfig, TrainConfig]:
    """The model and training configuration of :func:`fine_tune`, from the base run (a
    :class:`~posenc.layers.train.TrainResult`, or its ``(ModelConfig, TrainConfig)``
    pair).

    Raises:
        ValueError: unknown scale; seq_len not a positive int.
    """
    if scale not in FINE_TUNE_STEPS:
        raise ValueError(
            f"scale must be one of {', '.join(map(repr, FINE_TUNE_STEPS))}; got "
            f"{scale!r}"
        )
    seq_len = check_int("seq_len", seq_len, minimum=1)
    if isinstance(result_or_config, TrainResult):
        base_model, base = result_or_config.model.config, result_or_config.train_config
    else:
        base_model, base = result_or_config
    model_cfg = replace(
        base_model, scheme_options={**base_model.scheme_options, **scheme_options}
    )
    steps = FINE_TUNE_STEPS[scale]
    train_cfg = replace(
        base,
        seq_len=seq_len,
        batch_size=max(1, base.batch_size * base.seq_len // seq_len),
        steps=steps,
        lr=base.lr / 3,
        warmup_steps=steps // 10,
    )
    return model_cfg, train_cfg


def fine_tune(
    result: TrainResult,
    corpus: Corpus,
    *,
    seq_len: int,
    scale: str = "small",
    device=None,
    **scheme_options,
) -> TrainResult:
    """Continue training ``result``'s model at ``seq_len`` with new scheme options (e.g.
    a RoPE ``scaling``) for :data:`FINE_TUNE_STEPS` steps, at a third of the base
    learning rate, with the base run's tokens per step; cached like every training run.

    Raises:
        ValueError: unknown scale; seq_len not a positive int.
    """
    model_cfg, train_cfg = fine_tune_config(
        result, seq_len=seq_len, scale=scale, **scheme_options
    )
    return train(model_cfg, train_cfg, corpus, device=device, init=result)


def perplexity_table(
    results: dict[str, dict[int, float]],
    *,
    train_len: int | None = None,
    extra: dict[str, dict[str, str]] | None = None,
) -> str:
    """A Markdown table of ``{scheme: {length: perplexity}}``, one row per scheme.

    Args:
        results: as returned by :func:`extrapolation`; a length missing for a scheme
            shows as "cannot run".
        train_len: if given, headers also name the multiple of the training length.
        extra: optional further columns, ``{column title: {scheme: cell text}}``.

    Returns:
        Markdown text (for ``IPython.display.Markdown``).
    """
    extra = extra or {}
    lengths = sorted({n for by_len in results.values() for n in by_len})
    heads = [
        f"T = {n}"
        + (f" ({n // train_len}×)" if train_len and n % train_len == 0 else "")
        for n in lengths
    ]
    lines = [
        "| scheme | " + " | ".join(heads + list(extra)) + " |",
        "|---" * (len(heads) + len(extra) + 1) + "|",
    ]
    for name, by_len in results.items():
        cells = [f"{by_len[n]:.2f}" if n in by_len else "cannot run" for n in lengths]
        cells += [column.get(name, "") for column in extra.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: The label of the book's RoPE model with a learned sink logit per head in every
#: layer (gpt-oss), for the streaming section of "Mixing layers".
SINK_LABEL = "rope, sink logit"

#: The label of the book's RoPE model trained with Scalable-Softmax (Nakanishi 2025) in
#: every layer, s_h initialised to 1/ln L, for the remapping chapter's temperature
#: section: SSMax's scale is learned, so it is shown on a model trained with it.
SSMAX_LABEL = "rope, SSMax"

#: The context-extension chapter extends the RoPE model this many times.
CONTEXT_FACTOR = 4


@dataclass(frozen=True)
class BookRun:
    """One training run that a chapter loads: the standard experiment for ``scheme``
    with ``options``, or, when ``fine_tune_multiple`` is set, a :func:`fine_tune` of
    that run at ``fine_tune_multiple`` × the training length with ``fine_tune_options``.

    Options are stored as JSON text so that a run is hashable and picklable (it crosses
    to the worker processes of :mod:`posenc.book.prepare`); so is ``layers``, a layer
    pattern (:attr:`posenc.layers.model.ModelConfig.layers`) or "" for a uniform
    model."""

    scheme: str
    options: str = "{}"
    fine_tune_multiple: int | None = None
    fine_tune_options: str = "{}"
    label: str = ""
    layers: str = ""

    @classmethod
    def of(
        cls,
        scheme: str,
        *,
        label: str = "",
        fine_tune_multiple: int | None = None,
        fine_tune_options: dict | None = None,
        layers: list[dict] | None = None,
        **options,
    ) -> "BookRun":
        return cls(
            scheme,
            json.dumps(options, sort_keys=True),
            fine_tune_multiple,
            json.dumps(fine_tune_options or {}, sort_keys=True),
            label or scheme,
            "" if layers is None else json.dumps(layers, sort_keys=True),
        )

    @property
    def base(self) -> "BookRun":
        """The run a fine-tune starts from (itself when it is no fine-tune)."""
        return (
            BookRun(self.scheme, self.options, label=self.scheme)
            if self.fine_tune_multiple
            else self
        )

    def configs(
        self, scale: str = "small"
    ) -> tuple[tuple[ModelConfig, TrainConfig], tuple | None]:
        """``(base configs, fine-tune configs or None)``."""
        base = experiment_config(self.scheme, scale=scale, **json.loads(self.options))
        if self.layers:
            base = (replace(base[0], layers=json.loads(self.layers)), base[1])
        if self.fine_tune_multiple is None:
            return base, None
        tuned = fine_tune_config(
            base,
            seq_len=self.fine_tune_multiple * base[1].seq_len,
            scale=scale,
            **json.loads(self.fine_tune_options),
        )
        return base, tuned

    def run(
        self,
        corpus: Corpus | None = None,
        *,
        scale: str = "small",
        device=None,
        progress: bool = True,
    ) -> TrainResult:
        """Train it (or load it from the cache)."""
        (model_cfg, train_cfg), tuned = self.configs(scale)
        result = train(model_cfg, train_cfg, corpus, device=device, progress=progress)
        if tuned is None:
            return result
        return train(*tuned, corpus, device=device, progress=progress, init=result)


def book_runs(scale: str = "small") -> list[BookRun]:
    """Every training run the chapters load, trained before the notebooks execute by
    ``python -m posenc.book.prepare`` (``make book`` and ``make test`` run it first). A
    notebook cell then only loads weights; under ``POSENC_REQUIRE_CACHED=1`` (set by the
    Makefile) a run missing from this list is an error instead of a silent training run
    inside a cell.

    Every registered scheme is trained with its defaults, so a scheme added later joins
    by itself, unless it is a study condition only (:attr:`posenc.schemes.
    PositionalScheme.study_only`: :func:`posenc.schemes.chapter_schemes`).
    """
    train_len = experiment_config("none", scale=scale)[1].seq_len
    runs = [BookRun.of(name) for name in chapter_schemes()]
    runs.append(BookRun.of("learned", init_std=1.0, label="learned, init std 1.0"))
    # T5's and DeBERTa's bucket ranges no larger than the training length (every bucket
    # trained), beside their defaults (128 > 2L leaves the outer buckets untrained)
    runs.append(BookRun.of("t5", max_distance=train_len, label="t5, max_distance = L"))
    runs.append(
        BookRun.of("deberta", max_position=train_len, label="deberta, max_position = L")
    )
    # RoPE with gpt-oss's learned sink logit in every layer (streaming without sinks)
    num_layers = experiment_config("rope", scale=scale)[0].num_layers
    sink_layers = [{"sink": True}] * num_layers
    runs.append(BookRun.of("rope", layers=sink_layers, label=SINK_LABEL))
    ssmax = {"type": "ssmax", "init": 1 / math.log(train_len)}
    ssmax_layers = [{"query_temperature": ssmax}] * num_layers
    runs.append(BookRun.of("rope", layers=ssmax_layers, label=SSMAX_LABEL))
    methods = scaling_methods(train_len, float(CONTEXT_FACTOR))
    # Dynamic NTK set to s = 4 runs at s' = 4·4 − 3 = 13 when fine-tuned at 4L; with
    # factor 1 it runs at s' = 4 there: the comparison at a matched effective factor.
    methods["dynamic NTK, factor 1"] = {
        "rope_type": "dynamic",
        "factor": 1.0,
        "original_max_position_embeddings": train_len,
    }
    for name, scaling in methods.items():
        runs.append(
            BookRun.of(
                "rope",
                fine_tune_multiple=CONTEXT_FACTOR,
                fine_tune_options={"scaling": scaling},
                label=f"rope fine-tuned ×{CONTEXT_FACTOR}, {name}",
            )
        )
    return runs
