"""The experiments the book measures: the book's standard runs (:mod:`.runs`,
re-exported here, so that a chapter writes ``from posenc.experiments import
book_scale, ...``), the one stored-results protocol (:mod:`.store`, dispatching
runs through :mod:`.executor`: local processes or SLURM via submitit), the
length-generalization study (:mod:`.study` with :mod:`.study_grid`,
:mod:`.study_cost`, :mod:`.probes`, :mod:`.lm_evaluation`, :mod:`.stats`, and the
claims ledger :mod:`.ledger`), the pretrained-model study
(:mod:`.pretrained_study`) and the benchmarks
(:mod:`.bench`, with the CPU RoPE kernel they measure, :mod:`.kernels`).

Imports run one way: the encodings (:mod:`posenc`) ← the layers (:mod:`posenc.layers`)
← the experiments ← the book's tooling (:mod:`posenc.book`).
"""

from .runs import (
    SCALES,
    SCALE_ENV,
    book_scale,
    run_key,
    untrained_runs,
    training_plan,
    LENGTH_MULTIPLES,
    LEARNED_TABLE_MULTIPLE,
    EVAL_TOKENS,
    experiment_config,
    train_scheme,
    extrapolation,
    FINE_TUNE_STEPS,
    scaling_methods,
    fine_tune_config,
    fine_tune,
    perplexity_table,
    SINK_LABEL,
    SSMAX_LABEL,
    CONTEXT_FACTOR,
    BookRun,
    book_runs,
)

__all__ = [
    "SCALES",
    "SCALE_ENV",
    "book_scale",
    "run_key",
    "untrained_runs",
    "training_plan",
    "LENGTH_MULTIPLES",
    "LEARNED_TABLE_MULTIPLE",
    "EVAL_TOKENS",
    "experiment_config",
    "train_scheme",
    "extrapolation",
    "FINE_TUNE_STEPS",
    "scaling_methods",
    "fine_tune_config",
    "fine_tune",
    "perplexity_table",
    "SINK_LABEL",
    "SSMAX_LABEL",
    "CONTEXT_FACTOR",
    "BookRun",
    "book_runs",
]
