"""The study's results in prose: how the chapters put the length-generalization
study's intervals into sentences (every number computed from the stored results)."""

from __future__ import annotations

from ..experiments.ledger import series
from ..experiments.stats import change, paired_difference, seed_values
from ..experiments.study_grid import PRESETS


class Quotes:
    """The study's language-modelling results at one training length, quoted in prose:
    how the chapters put the study's intervals into sentences (every number computed).

    Args:
        df: :func:`posenc.experiments.study.load_results` (default: loaded, with
            ``strict``).
        train_length: which L (default: the preset's).
        strict: passed to :func:`posenc.experiments.study.load_results` when ``df`` is
            not given.
        preset: which edition ``df`` is loaded from and ``train_length`` defaults to:
            ``"cpu"`` (the first) or ``"cpu2"`` (the second edition).

    Raises:
        ValueError: an unknown preset.
    """

    def __init__(
        self, df=None, *, train_length: int | None = None, strict=True, preset="cpu"
    ):
        if preset not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
        if df is None:
            from ..experiments.study import load_results

            df = load_results(preset=preset, strict=strict)
        self.preset = preset
        self.train_length = train_length or PRESETS[preset]["train"]["seq_len"]
        self.lm = df[(df["kind"] == "lm") & (df["train_length"] == self.train_length)]
        self.seeds = self.lm["seed"].nunique()

    def values(self, scheme: str, multiple: int, metric: str = "loss_sliding"):
        """The loss of ``scheme`` at multiple·L, one value per seed (a Series)."""
        return seed_values(self.lm, scheme, metric=metric,
                           eval_length=multiple * self.train_length)

    def change(self, scheme, multiple, base=1, metric="loss_sliding") -> dict:
        """Loss at multiple·L minus loss at base·L, seed by seed
        (:func:`posenc.experiments.stats.change`): ``{"mean", "lower", "upper", "n",
        "resolved"}``; with one seed the interval is NaN and the change not resolved.

        Raises:
            ValueError: ``multiple`` equals ``base``, or the two lengths share no seed
                of ``scheme`` (e.g. a learned table that cannot run at multiple·L).
        """
        if multiple == base:
            raise ValueError(f"multiple and base must differ, got {multiple} for both")
        found = change(self.lm, scheme, base * self.train_length,
                       multiple * self.train_length, metric=metric)
        if found is None:
            raise ValueError(
                f"{scheme!r} has no seed scored at both {multiple}·L and {base}·L "
                f"({metric})"
            )
        return found

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
        return series(labels, mark="`")

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
