"""The length-generalization study's grid: its presets, the variants of schemes it
trains, one run of the grid (:class:`StudyRun`, whose key names everything its results
depend on), and the runs of each phase (the learning-rate sweep, then the main runs at
each scheme's best rate).

:mod:`posenc.experiments.study` runs the grid and stores its results; see its docstring.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace

from ..layers.data import Corpus, load_stdlib_corpus
from ..layers.model import LAYER_PRESETS, ModelConfig, layer_preset
from .probes import PROBES, probe_floor, probe_learned
from ..schemes import chapter_schemes
from ..layers.train import TrainConfig, cache_key, scheme_arguments

#: Bump when a change to the study's code (not to a scheme) changes its results.
STUDY_VERSION = 1

#: The evaluation lengths, as multiples of the training length.
MULTIPLES = (1, 2, 4, 8)

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
    # a GPU: a wider model, 5 seeds, every validation block scored. Its first 21 sweep
    # runs (an H200, 2026-11-28) were all best at 3e-3, the top rate: 1e-2 was added so
    # that the sweep brackets its best rate (stored runs keep their keys)
    "gpu": {
        "model": {"d_model": 256, "num_heads": 4, "num_layers": 4},
        "train": {"seq_len": 64, "batch_size": 64, "steps": 4000, "warmup_steps": 200},
        "learning_rates": (3e-4, 1e-3, 3e-3, 1e-2),
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
    # The second edition (book/design.md, "The study's second edition"): 4 heads of 32
    # and 4 layers, the length-generalization methods of 2023–2026, probes at a swept
    # learning rate. Sized to about 14 CPU-hours from one measured run of this model
    # (609 s of process time for a language-modelling run, 205 s for 600 probe steps);
    # what that budget dropped is listed in design.md.
    "cpu2": {
        "model": {"d_model": 128, "num_heads": 4, "num_layers": 4},
        "train": {"seq_len": 64, "batch_size": 32, "steps": 1000, "warmup_steps": 50},
        "learning_rates": (1e-3, 3e-3, 1e-2),
        "seeds": (0, 1, 2),
        "long_length": 256,
        "long_schemes": (),
        "long_seeds": (),
        "block_every": 16,
        "long_block_every": 16,
        "probe_steps": 3000,
        "probe_batch_size": 16,
        "probe_lr": None,
        "probe_sequences": 192,
        "edition": 2,
        "probe_learning_rates": (3e-4, 1e-3, 3e-3),
        "probe_schemes": ("rope", "alibi", "deberta", "fire", "kerple, log"),
        "base_sweep": {
            "bases": (1e2, 1e3, 1e4, 1e5),
            "lengths": (32, 64, 128),
            "seeds": (0,),
            "probe_length": 64,
        },
        "random_positions": {"schemes": ("rope",), "multiple": 32},
        "drope": {
            "schemes": ("rope",),
            "steps": 100,
            "warmup_steps": 10,
            "lr_ratio": 1 / 3,
        },
    },
}

#: A DroPE recalibration's seed is its source's plus this (a seed of its own: the
#: source's would replay the source's first batches, :func:`posenc.layers.drope.drope`).
DROPE_SEED_OFFSET = 1000


def edition(preset: str) -> int:
    """The study's edition a preset belongs to: 1 (2 heads, 2 layers; the stored
    ``cpu`` study and the ``gpu`` preset) or 2 (``cpu2``)."""
    return PRESETS[preset].get("edition", 1)


def study_scheme_variants(train_length: int) -> dict[str, tuple[str, dict]]:
    """The study-only schemes of the second edition at their study settings
    (``{label: (scheme, options)}``): FIRE with its threshold L₀ = L/4 (the paper's 512
    at its training length 2048: Li et al. 2024, §4) and Kerple's logarithmic kernel
    (Chi et al. 2022, eq. 7). Kerple's power kernel is not in the grid (the budget's
    fourth cut)."""
    return {
        "fire": ("fire", {"init_threshold": float(max(1, train_length // 4))}),
        "kerple, log": ("kerple", {"kernel": "log"}),
    }


def main_labels(labels, train_length: int) -> list[str]:
    """The study's main conditions among ``labels``, in their order: each scheme at its
    default settings (a label without a comma) and the study-only schemes of
    :func:`study_scheme_variants` (``"kerple, log"``), not the variants of a scheme
    (bucket ranges, layer patterns, randomized positions, DroPE, RoPE's bases)."""
    extra = study_scheme_variants(train_length)
    return [lab for lab in labels if "," not in lab or lab in extra]


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

#: The layer patterns of today's models in the study
#: (posenc.layers.model.LAYER_PRESETS).
STUDY_LAYER_PRESETS = ("llama4", "gemma3", "smollm3", "command_r7b", "gpt_oss")


def pattern_variants(train_length: int, num_layers: int) -> dict[str, dict]:
    """The variants of RoPE that today's models use, trained like the schemes (language
    modelling and probes) at RoPE's swept learning rate: p-RoPE, and each model's
    layer pattern (:func:`posenc.layers.model.layer_preset`) with window or chunk L/4
    and the period shortened to ``num_layers`` where the model's is longer (the CPU
    preset's 2 layers: one local and one global layer).

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
        layers: a layer pattern (:attr:`posenc.layers.model.ModelConfig.layers`) as JSON
            text, or "" for a uniform model.
        train_options: fields of :class:`~posenc.layers.train.TrainConfig` set for this
            run (randomized positions: ``{"random_positions": N}``) as JSON text, or "".
        recalibration: a run that trains on from this run's model trained as
            configured (its source), as JSON text: ``steps``, ``warmup_steps``,
            ``lr_ratio`` (the rate is the source's times this) and ``drop`` (true:
            DroPE, :func:`posenc.layers.drope.drope`, recalibrated without the
            encoding; false: its control, the same steps with the encoding kept); ""
            for every other run.
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
    train_options: str = ""
    recalibration: str = ""

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
            **(json.loads(self.train_options) if self.train_options else {}),
        )
        layers = json.loads(self.layers) if self.layers else None
        model_cfg = ModelConfig(
            scheme=self.scheme, scheme_options=options, layers=layers, **p["model"]
        )
        return model_cfg, train_cfg

    def recalibration_config(self) -> TrainConfig | None:
        """The training on from the source (:attr:`recalibration`): the source's
        configuration with its steps, warm-up, rate × ``lr_ratio`` and a seed of its
        own; None for other runs."""
        if not self.recalibration:
            return None
        _, train_cfg = self.configs()
        spec = json.loads(self.recalibration)
        return replace(
            train_cfg,
            seed=self.seed + DROPE_SEED_OFFSET,
            steps=spec["steps"],
            warmup_steps=spec["warmup_steps"],
            lr=train_cfg.lr * spec["lr_ratio"],
        )

    @property
    def drops_encoding(self) -> bool:
        """Whether the run is DroPE (its recalibration drops the encoding)."""
        return bool(self.recalibration) and json.loads(self.recalibration)["drop"]

    def evaluation(self) -> dict:
        """What is scored: part of the key, so a changed protocol reruns."""
        p = PRESETS[self.preset]
        if self.kind == "sweep":
            every = p.get("sweep_block_every", 4)
            return {"protocol": "sliding", "multiples": [1], "block_every": every}
        if self.kind == "probe":
            return {
                "probes": sorted(PROBES),
                "multiples": list(MULTIPLES),
                "sequences": p["probe_sequences"],
            }
        long = self.train_length != p["train"]["seq_len"]
        out = {
            "protocol": "sliding+matched",
            "multiples": list(MULTIPLES),
            "block_every": p["long_block_every" if long else "block_every"],
        }
        drawn = self.configs()[1].random_positions
        if drawn is not None:  # also on drawn positions, as the model was trained
            out["drawn_positions"] = drawn
        return out

    def key(self, corpus: Corpus) -> str:
        """A stable hash of everything that determines this run's results, computed
        from the run alone: no field of a stored record (such as its ``model``
        section's ``head_dim``, stored as ``d_head`` before) enters it."""
        model_cfg, train_cfg = self.configs()
        payload = {
            "study": STUDY_VERSION,
            "kind": self.kind,
            "train": cache_key(model_cfg, train_cfg, corpus),
            "scheme_arguments": scheme_arguments(model_cfg),
            "evaluation": self.evaluation(),
        }
        if self.recalibration:
            payload["recalibration"] = {
                **self.recalibration_config().to_dict(),
                "drop": self.drops_encoding,
            }
        text = json.dumps(payload, sort_keys=True, default=str)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return f"{self.kind}-{self.scheme}-s{self.seed}-L{self.train_length}-{digest}"



def study_corpus() -> Corpus:
    """The study's corpus: the recursive standard library (:func:`posenc.layers.data.
    load_stdlib_corpus` with ``recursive=True``), whose validation split is over 1 MB
    in many files."""
    return load_stdlib_corpus(recursive=True)



def _schemes(train_length: int, num_layers: int) -> dict[str, tuple]:
    """``{label: (scheme, options, layers, kinds)}``: every registered scheme at its
    defaults but the study-only ones (:func:`posenc.schemes.chapter_schemes`; they
    join the grid by entries of their own once their runs are stored), the bucket
    variants (language modelling only), then the variants of today's models
    (:func:`pattern_variants`)."""
    out = {name: (name, {}, None, ("lm", "probe")) for name in chapter_schemes()}
    for label, v in bucket_variants(train_length).items():
        out[label] = (v["scheme"], v["options"], None, ("lm",))
    for label, v in pattern_variants(train_length, num_layers).items():
        out[label] = (v["scheme"], v["options"], v["layers"], ("lm", "probe"))
    return out


def _swept(preset: str) -> dict[str, tuple[str, str]]:
    """``{label: (scheme, options as JSON)}``: what the learning-rate sweep trains,
    each registered scheme at its defaults but the study-only ones, and in the second
    edition also the study-only schemes at their study settings."""
    out = {name: (name, "{}") for name in chapter_schemes()}
    if edition(preset) >= 2:
        L = PRESETS[preset]["train"]["seq_len"]
        for label, (scheme, options) in study_scheme_variants(L).items():
            out[label] = (scheme, json.dumps(options, sort_keys=True))
    return out


def sweep_runs(preset: str = "cpu") -> list[StudyRun]:
    """Phase 1: each swept scheme (:func:`_swept`), seed 0, at each learning rate of
    the preset; in the second edition also each probed scheme's probes, seed 0, at
    each of the preset's ``probe_learning_rates`` (the run at the best rate is also
    the main grid's seed 0: the same key, stored once)."""
    p = PRESETS[preset]
    L = p["train"]["seq_len"]
    swept = _swept(preset)
    runs = [
        StudyRun("sweep", label, scheme, options, 0, L, lr, preset)
        for label, (scheme, options) in swept.items()
        for lr in p["learning_rates"]
    ]
    for label in p.get("probe_schemes", ()):
        scheme, options = swept[label]
        runs += [
            StudyRun("probe", label, scheme, options, 0, L, lr, preset)
            for lr in p["probe_learning_rates"]
        ]
    return runs


def _best(runs, records, corpus, score) -> dict[str, float]:
    """``{label: the learning rate of the run with the lowest score}`` over ``runs``
    (a score is a number or a tuple; ties go to the earlier run); raises KeyError
    naming a missing run."""
    best: dict[str, tuple[float, float]] = {}
    for run in runs:
        key = run.key(corpus)
        if key not in records:
            raise KeyError(f"sweep run {key} ({run.label}, lr {run.lr}) is missing")
        value = score(records[key]["rows"])
        if run.label not in best or value < best[run.label][1]:
            best[run.label] = (run.lr, value)
    return {label: lr for label, (lr, _) in best.items()}


def best_learning_rates(
    records: dict[str, dict], preset: str = "cpu", corpus: Corpus | None = None
) -> dict[str, float]:
    """``{label: the swept learning rate with the lowest validation loss at L}``, from
    the stored sweep records (a label is its scheme's name but for the second
    edition's study-only settings, :func:`study_scheme_variants`); raises KeyError
    naming a missing sweep run."""
    corpus = corpus if corpus is not None else study_corpus()

    def loss(rows):
        (row,) = [r for r in rows if r["metric"] == "loss_sliding"]
        return row["value"]

    return _best(
        [r for r in sweep_runs(preset) if r.kind == "sweep"], records, corpus, loss
    )


def best_probe_rates(
    records: dict[str, dict], preset: str = "cpu", corpus: Corpus | None = None
) -> dict[str, float]:
    """``{label: the probe learning rate whose seed-0 run learned the most probes at
    L}`` (second edition): learned as :func:`~posenc.experiments.probes.probe_learned`
    judges it; ties go to the higher mean of accuracy above the floor as a share of
    what is above it, (a − floor) / (1 − floor), then to the lower rate. ``{}`` for a
    preset without a probe sweep. Raises KeyError naming a missing run."""
    corpus = corpus if corpus is not None else study_corpus()
    L = PRESETS[preset]["train"]["seq_len"]

    def error(rows):
        at_l = {
            r["task"]: r["value"]
            for r in rows
            if r["metric"] == "accuracy" and r["eval_length"] == L
        }
        learned = sum(probe_learned(a, task) for task, a in at_l.items())
        above = [
            (a - probe_floor(task)) / (1 - probe_floor(task))
            for task, a in at_l.items()
        ]
        return (-learned, -sum(above) / len(above))

    return _best(
        [r for r in sweep_runs(preset) if r.kind == "probe"], records, corpus, error
    )


def base_label(base: float) -> str:
    """The label of a RoPE base sweep's condition: ``"rope, base = 1e2"``."""
    return f"rope, base = 1e{round(math.log10(base))}"


def _edition2_runs(
    lrs: dict[str, float], probe_lrs: dict[str, float], preset: str
) -> list[StudyRun]:
    """The second edition's main runs: each swept label's language modelling × seeds
    and each probed label's probes × seeds at their best rates; the RoPE base sweep
    (each base × each length at RoPE's rate, and the probes at ``probe_length``; base
    10⁴ at the preset's L is RoPE's own run); randomized positions over
    [0, multiple · L); DroPE from each seed's trained RoPE model, and its control, the
    same training on with the encoding kept (``"rope, continued"``)."""
    p = PRESETS[preset]
    L = p["train"]["seq_len"]
    runs = []
    for label, (scheme, options) in _swept(preset).items():
        runs += [
            StudyRun("lm", label, scheme, options, s, L, lrs[label], preset)
            for s in p["seeds"]
        ]
        if label in p["probe_schemes"]:
            lr = probe_lrs[label]
            runs += [
                StudyRun("probe", label, scheme, options, s, L, lr, preset)
                for s in p["seeds"]
            ]
    sweep = p["base_sweep"]
    for length in sweep["lengths"]:
        for base in sweep["bases"]:
            if length == L and base == 1e4:
                continue  # RoPE's own run
            options = json.dumps({"base": base})
            runs += [
                StudyRun(
                    "lm", base_label(base), "rope", options, s, length, lrs["rope"],
                    preset,
                )
                for s in sweep["seeds"]
            ]
            if length == sweep["probe_length"]:  # retrieval, as Men et al. test it
                runs += [
                    StudyRun(
                        "probe", base_label(base), "rope", options, s, length,
                        probe_lrs["rope"], preset,
                    )
                    for s in sweep["seeds"]
                ]
    randomized = p["random_positions"]
    for scheme in randomized["schemes"]:
        extra = json.dumps({"random_positions": randomized["multiple"] * L})
        runs += [
            StudyRun(
                "lm", f"{scheme}, random positions", scheme, "{}", s, L, lrs[scheme],
                preset, train_options=extra,
            )
            for s in p["seeds"]
        ]
    spec = p["drope"]
    for scheme in spec["schemes"]:
        labels = {True: f"drope, from {scheme}", False: f"{scheme}, continued"}
        for drop, label in labels.items():
            recal = json.dumps(
                {k: spec[k] for k in ("steps", "warmup_steps", "lr_ratio")}
                | {"drop": drop},
                sort_keys=True,
            )
            runs += [
                StudyRun(
                    "lm", label, scheme, "{}", s, L, lrs[scheme], preset,
                    recalibration=recal,
                )
                for s in p["seeds"]
            ]
    return runs


def main_runs(
    lrs: dict[str, float],
    preset: str = "cpu",
    probe_lrs: dict[str, float] | None = None,
) -> list[StudyRun]:
    """Phase 2, given each label's learning rate (and, in the second edition, each
    probed label's probe rate, :func:`best_probe_rates`). First edition: every scheme
    (and bucket variant) × every seed at L for language modelling; every scheme ×
    every seed at L for the probes (at the preset's ``probe_lr``); the long-L schemes ×
    their seeds at the preset's longer L. Second edition: :func:`_edition2_runs`."""
    if edition(preset) >= 2:
        if probe_lrs is None:
            raise ValueError(f"preset {preset!r} needs probe_lrs (best_probe_rates)")
        return _edition2_runs(lrs, probe_lrs, preset)
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


def planned_runs(
    records: dict[str, dict], preset: str = "cpu", corpus: Corpus | None = None
) -> list[StudyRun]:
    """Every run of the grid, phase 1 and phase 2, with the learning rates read from
    the stored sweep; raises KeyError naming a missing sweep run."""
    corpus = corpus if corpus is not None else study_corpus()
    lrs = best_learning_rates(records, preset, corpus)
    probe_lrs = best_probe_rates(records, preset, corpus)
    runs = sweep_runs(preset) + main_runs(lrs, preset, probe_lrs)
    # a probed label's seed-0 run at its best rate is also a sweep run: listed once
    unique: dict[str, StudyRun] = {}
    for run in runs:
        unique.setdefault(run.key(corpus), run)
    return list(unique.values())



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
