"""DroPE (Gelberg et al., ICLR 2026, arXiv 2512.12167): a trained model's positional
encoding removed after training, then a short recalibration (:func:`drope`)."""

from __future__ import annotations

from dataclasses import replace

from .data import Corpus
from .model import TinyLM
from .train import TrainConfig, TrainResult, train


def drope(
    source: TrainResult,
    train_config: TrainConfig,
    corpus: Corpus | None = None,
    **train_options,
) -> TrainResult:
    """DroPE (Gelberg et al., ICLR 2026, "Extending the Context of Pretrained LLMs by
    Dropping Their Positional Embeddings", arXiv 2512.12167): the trained model
    ``source`` with its positional encoding removed, then recalibrated — trained on
    for ``train_config`` (the same objective; the paper keeps the training length and
    spends a small share of the pretraining budget) from ``source``'s weights.

    Removing RoPE is the authors' ``NoPEAttention`` (SakanaAI/DroPE,
    ``custom_models/attention.py``): RoPE with cos = 1 and sin = 0, an identity
    rotation, which is the ``"none"`` scheme with the same weights. Their optional
    QK-norm variant is not implemented here. The paper drops RoPE only; dropping
    another encoding that holds no weights (ALiBi, xPos, sinusoidal) the same way is
    posenc's extension.

    Give the recalibration a seed of its own: with the source's seed it replays the
    source's batches from its first step.

    Args:
        source: a trained model with one scheme in every layer, holding no weights,
            as :func:`train` returns it.
        train_config: the recalibration (its ``seq_len``, ``steps``, ``lr``, seed).
        corpus: as for :func:`train`. train_options: passed to :func:`train` (device,
            use_cache, progress, …).

    Returns:
        The recalibrated model's :class:`TrainResult` (scheme ``"none"``), cached like
        any fine-tune: its key holds ``source``'s key.

    Raises:
        ValueError: ``source`` has no encoding to drop (scheme ``"none"``), a layer
            pattern (``ModelConfig.layers``: drop each layer's scheme by hand), or a
            scheme that holds weights (a learned table, a relative bias): removing it
            would drop trained parameters, which DroPE does not do.
    """
    config = source.model.config
    if config.layers is not None:
        raise ValueError(
            "drope takes a model without ModelConfig.layers; got layers="
            f"{config.layers!r}"
        )
    if config.scheme == "none":
        raise ValueError("drope: the model has no positional encoding to drop")
    dropped = replace(config, scheme="none", scheme_options={})
    own = set(source.model.state_dict()) - set(TinyLM(dropped).state_dict())
    if own:
        raise ValueError(
            f"DroPE removes an encoding that holds no weights; scheme "
            f"{config.scheme!r} has its own parameters: {sorted(own)[:3]}"
        )
    return train(dropped, train_config, corpus, init=source, **train_options)
