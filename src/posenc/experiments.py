"""The book's standard extrapolation experiment, shared by every chapter.

Every chapter trains the tiny LM with *the same* configuration and only the scheme changes, so the
trained weights are cached once (:mod:`posenc.train`) and chapters can be compared. The only knob
is ``scale``: ``"small"`` runs in about half a minute per scheme on a 2-core CPU, ``"large"`` is
meant for a GPU. Notebooks choose it with one switch::

    SCALE = "large" if posenc.get_device().type == "cuda" else "small"
"""

from __future__ import annotations

from .data import Corpus
from .model import ModelConfig
from .train import TrainConfig, TrainResult, perplexity_by_length, train

SCALES = {
    "small": {"model": {"d_model": 64, "num_heads": 4, "num_layers": 2},
              "train": {"seq_len": 64, "batch_size": 32, "steps": 1000}},
    "large": {"model": {"d_model": 256, "num_heads": 8, "num_layers": 4},
              "train": {"seq_len": 256, "batch_size": 64, "steps": 3000, "lr": 1e-3, "warmup_steps": 200}},
}
#: Evaluation lengths, as multiples of the training length.
LENGTH_MULTIPLES = (1, 2, 4, 8)
#: A learned table covers this many training lengths (so 8× is past its end).
LEARNED_TABLE_MULTIPLE = 4
#: Validation bytes scored at every length.
EVAL_TOKENS = 32768


def experiment_config(scheme: str, *, scale: str = "small", **scheme_options) -> tuple[ModelConfig, TrainConfig]:
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
        raise ValueError(f"scale must be one of {', '.join(map(repr, SCALES))}; got {scale!r}")
    sizes = SCALES[scale]
    train_cfg = TrainConfig(**sizes["train"])
    if scheme == "learned":
        scheme_options.setdefault("max_len", LEARNED_TABLE_MULTIPLE * train_cfg.seq_len)
    model_cfg = ModelConfig(scheme=scheme, scheme_options=scheme_options, **sizes["model"])
    return model_cfg, train_cfg


def train_scheme(scheme: str, corpus: Corpus | None = None, *, scale: str = "small", device=None,
                 **scheme_options) -> TrainResult:
    """Train (or load from the cache) the standard model for ``scheme``."""
    model_cfg, train_cfg = experiment_config(scheme, scale=scale, **scheme_options)
    return train(model_cfg, train_cfg, corpus, device=device)


def extrapolation(result: TrainResult, corpus: Corpus, *, multiples=LENGTH_MULTIPLES) -> dict[int, float]:
    """``{evaluation length: validation perplexity}`` at the given multiples of the training length,
    all scored on the same first :data:`EVAL_TOKENS` validation bytes
    (:func:`posenc.train.perplexity_by_length`).

    Lengths past a scheme's ``max_positions`` (the end of a learned table) cannot be processed at
    all and are left out of the result; :func:`perplexity_table` marks them "cannot run".
    """
    train_len = result.train_config.seq_len
    limit = result.model.scheme.max_positions
    lengths = [k * train_len for k in multiples if limit is None or k * train_len <= limit]
    return perplexity_by_length(result.model, corpus.val, lengths, max_tokens=EVAL_TOKENS)


def perplexity_table(results: dict[str, dict[int, float]], *, train_len: int | None = None,
                     extra: dict[str, dict[str, str]] | None = None) -> str:
    """A Markdown table of ``{scheme: {length: perplexity}}``, one row per scheme.

    Args:
        results: as returned by :func:`extrapolation`; a length missing for a scheme shows as
            "cannot run".
        train_len: if given, headers also name the multiple of the training length.
        extra: optional further columns, ``{column title: {scheme: cell text}}``.

    Returns:
        Markdown text (for ``IPython.display.Markdown``).
    """
    extra = extra or {}
    lengths = sorted({n for by_len in results.values() for n in by_len})
    heads = [f"T = {n}" + (f" ({n // train_len}×)" if train_len and n % train_len == 0 else "") for n in lengths]
    lines = ["| scheme | " + " | ".join(heads + list(extra)) + " |", "|---" * (len(heads) + len(extra) + 1) + "|"]
    for name, by_len in results.items():
        cells = [f"{by_len[n]:.2f}" if n in by_len else "cannot run" for n in lengths]
        cells += [column.get(name, "") for column in extra.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
