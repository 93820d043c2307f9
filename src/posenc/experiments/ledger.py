"""The claims ledger: each claim about positional encodings that the book makes or
tests, where it comes from, and the verdict one rule gives it on an edition of the
length-generalization study (:mod:`posenc.experiments.study`). The page "The claims
ledger" shows the verdicts of both editions side by side.

The rule (:func:`judge`, :func:`combine`), over 95 % Student-t intervals across seeds,
paired by seed where two schemes are compared, losses in nats per byte:

* a claim about the sign of a difference is *supported* when its interval lies on the
  predicted side, *contradicted* on the other, *not resolved* when it holds zero;
* a claim that a loss is not higher is *supported* when the whole interval lies below
  :data:`FLAT`, *contradicted* when wholly above it, *not resolved* otherwise;
* a claim over several comparisons is *supported* when all support it, *contradicted*
  when one contradicts it, *not resolved* otherwise.

A claim whose conditions an edition does not hold is *not tested in this edition*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ..alibi import alibi_slopes
from ..schemes import build_scheme
from .probes import PROBES, probe_floor, probe_learned
from .stats import change, difference_interval, paired_difference, seed_values
from .study_grid import MULTIPLES, PRESETS, main_labels

#: The margin of a "not higher" claim, nats per byte: a perplexity within 5 %. A
#: convention of the book, not a statistical quantity.
FLAT = 0.05
NOT_TESTED = "not tested in this edition"
#: A verdict over two kinds of model (a probe model and a language model of one scheme).
ACROSS = " (across models of one scheme)"


def judge(d: dict, predicts: str) -> str:
    """The rule for one interval ``d`` (``{"lower", "upper", ...}``): ``predicts`` is a
    sign, ``"positive"`` or ``"negative"``, or ``"not higher"`` (below :data:`FLAT`)."""
    if predicts == "not higher":
        if d["upper"] < FLAT:
            return "supported"
        return "contradicted" if d["lower"] > FLAT else "not resolved"
    if predicts not in ("positive", "negative"):
        raise ValueError(
            f"predicts must be 'positive', 'negative' or 'not higher', got {predicts!r}"
        )
    side = "positive" if d["lower"] > 0 else "negative" if d["upper"] < 0 else None
    if side is None:
        return "not resolved"
    return "supported" if side == predicts else "contradicted"


def combine(verdicts) -> str:
    """The rule for a claim over several comparisons."""
    verdicts = list(verdicts)
    if "contradicted" in verdicts:
        return "contradicted"
    if verdicts and all(v == "supported" for v in verdicts):
        return "supported"
    return "not resolved"


def text(d: dict, digits: int = 4) -> str:
    """``"+0.0121 [−0.0030, +0.0270]"``: an interval as the ledger quotes it."""
    return (
        f"{d['mean']:+.{digits}f} [{d['lower']:+.{digits}f}, {d['upper']:+.{digits}f}]"
    )


def series(parts, mark: str = "") -> str:
    """``"a, b and c"``: a list in words, each part between ``mark`` (``"**"`` bolds).

    Raises ValueError when ``parts`` is empty: there is nothing to name.
    """
    parts = [f"{mark}{part}{mark}" for part in parts]
    if not parts:
        raise ValueError("series needs at least one part, got none")
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _fractions(slopes) -> str:
    """``"1/2, 1/4 and 1/8"``."""
    return series(f"1/{1 / s:.0f}" for s in slopes)


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``11th``, …"""
    suffix = "th" if 10 <= n % 100 < 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10)
    return f"{n}{suffix or 'th'}"


@dataclass
class Claim:
    """One row of the ledger. ``intervals(confidence)`` (``{name: interval}``) and
    ``predicts`` are set when intervals decide the verdict (and then a stricter
    confidence can re-judge it); otherwise the verdict is the claim's own rule."""

    key: str
    claim: str
    source: str
    caveat: str
    verdict: str
    evidence: str
    intervals: Callable[[float], dict] | None = None
    predicts: str | None = None

    def rejudged(self, confidence: float) -> str:
        """The verdict with every interval at ``confidence`` (the stored verdict for
        a claim that intervals do not decide)."""
        if self.intervals is None:
            return self.verdict
        found = self.intervals(confidence)
        return combine(judge(d, self.predicts) for d in found.values())


class Edition:
    """One edition's stored results, and the comparisons the ledger makes on them.

    Args:
        df: :func:`posenc.experiments.study.load_results` of the edition.
        preset: its preset (``"cpu"``: the first edition, ``"cpu2"``: the second).

    Attributes: ``labels`` (every language model at L but RoPE's base sweep), ``main``
    (its main conditions, :func:`~posenc.experiments.study_grid.main_labels`),
    ``rise`` (each label's change from L to its longest length) and ``flat``.
    """

    def __init__(self, df, preset: str):
        self.preset_name, self.preset = preset, PRESETS[preset]
        self.L = self.preset["train"]["seq_len"]
        self.TOP = max(MULTIPLES)
        at_l = df[df["train_length"] == self.L]
        self.lm = at_l[(at_l["kind"] == "lm") & (at_l["task"] == "language_modeling")]
        self.probes = at_l[(at_l["kind"] == "probe") & (at_l["metric"] == "accuracy")]
        self.labels = [
            lab for lab in dict.fromkeys(self.lm["scheme"])
            if not lab.startswith("rope, base")
        ]
        self.main = main_labels(self.labels, self.L)
        model = self.preset["model"]
        self.d_model, self.num_heads = model["d_model"], model["num_heads"]
        self.rise = {lab: self.change(lab, 1, self.longest(lab)) for lab in self.labels}
        self.flat = [
            lab for lab in self.labels
            if judge(self.rise[lab], "not higher") == "supported"
        ]

    def values(self, label: str, multiple: int, metric: str = "loss_sliding"):
        """Per-seed losses of ``label`` at E = multiple × L (a Series by seed)."""
        return seed_values(self.lm, label, eval_length=multiple * self.L, metric=metric)

    def longest(self, label: str) -> int:
        """The largest multiple of L ``label`` was scored at."""
        return max(m for m in MULTIPLES if len(self.values(label, m)))

    def change(self, label, m_from, m_to, metric="loss_sliding", confidence=0.95):
        """``label`` at m_to × L minus at m_from × L, seed by seed, with its
        interval."""
        return change(self.lm, label, m_from * self.L, m_to * self.L, metric=metric,
                      confidence=confidence)

    def diff(self, a: str, b: str, multiple: int | None = None, confidence=0.95):
        """``a`` minus ``b`` at multiple × L (default: the longest both run), paired."""
        multiple = multiple or min(self.longest(a), self.longest(b))
        return paired_difference(self.lm, a, b, confidence=confidence,
                                 eval_length=multiple * self.L, metric="loss_sliding")

    def rise_diff(self, a: str, b: str, confidence=0.95) -> dict:
        """``a`` 's rise from L minus ``b`` 's, to the longest length both run,
        paired by seed."""
        m = min(self.longest(a), self.longest(b))
        d = (self.values(a, m) - self.values(a, 1)) - (self.values(b, m)
                                                       - self.values(b, 1))
        return difference_interval(d.dropna().tolist(), confidence)

    def has(self, *labels: str) -> bool:
        """Whether this edition trained every one of ``labels``."""
        return all(lab in self.labels for lab in labels)

    def accuracy(self, label: str, task: str, multiple: int):
        """Per-seed probe accuracy of ``label`` at E = multiple × L."""
        return seed_values(self.probes, label, task=task, eval_length=multiple * self.L)

    def at_edge(self, label: str) -> bool:
        """Whether ``label`` 's language models train at the lowest or highest rate
        of the edition's sweep."""
        rates = self.preset["learning_rates"]
        (lr,) = set(self.lm.loc[self.lm["scheme"] == label, "lr"])
        return lr in (min(rates), max(rates))

    def probe_rate(self) -> str:
        """How the probe models' learning rate was set, in words."""
        if "probe_learning_rates" in self.preset:
            rates = ", ".join(f"{r:g}" for r in self.preset["probe_learning_rates"])
            return f"each at the best of the rates {rates} for its scheme"
        return f"all trained at one learning rate ({self.preset['probe_lr']:g})"


class _Rows(list):
    """The ledger being built for ``edition``: :meth:`add` appends one
    :class:`Claim`."""

    def __init__(self, edition: Edition):
        super().__init__()
        self.edition = edition

    def add(self, key, claim, source, caveat, *, intervals=None, predicts=None,
            decided=None, evidence=None, needs=(), by_rise=None):
        """A claim decided by ``intervals`` (with ``predicts``, and optionally an
        ``evidence(found)`` text) or by its own rule (``decided``, ``evidence``);
        ``needs``: labels without which it is :data:`NOT_TESTED`. ``by_rise``: the
        same comparisons made on the rise from L (``{name: interval}``), whose
        verdict the caveat reports."""
        if not self.edition.has(*needs):
            self.append(Claim(key, claim, source, caveat, NOT_TESTED,
                              "the edition trained no " + ", ".join(
                                  f"`{lab}`" for lab in needs
                                  if lab not in self.edition.labels)))
            return
        if intervals is not None:
            found = intervals(0.95)
            verdict = combine(judge(d, predicts) for d in found.values())
            if by_rise:
                again = combine(judge(d, predicts) for d in by_rise.values())
                caveat += ("; the rise from L gives the same verdict"
                           if again == verdict
                           else f"; compared by the rise from L it is {again}")
            shown = evidence(found) if evidence else "; ".join(
                f"{name}: {text(d)}" for name, d in found.items())
            self.append(Claim(key, claim, source, caveat, verdict, shown, intervals,
                              predicts))
        else:
            self.append(Claim(key, claim, source, caveat, decided, evidence))


def _absolute_and_alibi(rows: _Rows, e: Edition) -> None:
    top = e.TOP
    table_rows = build_scheme("learned", d_model=e.d_model, num_heads=e.num_heads,
                              max_len=4 * e.L).max_positions
    rows.add("learned", "Learned tables cannot go past their size",
             "the learned-embeddings chapter",
             "by construction: what is measured is the refusal, and the rise before it",
             decided="supported" if e.longest("learned") * e.L <= table_rows < top * e.L
             else "contradicted",
             evidence=f"a table of {table_rows} rows runs to "
             f"{e.longest('learned')}L and refuses {top}L; rise from L: "
             + text(e.rise["learned"]),
             needs=("learned",))
    rows.add("sinusoidal", "Sinusoidal encodings extrapolate weakly in practice",
             "Press et al. 2022, Fig. 1", "'weakly' read as: the loss rises past L",
             intervals=lambda c: {f"rise from L to {top}L": e.change(
                 "sinusoidal", 1, top, confidence=c)}, predicts="positive",
             needs=("sinusoidal",))
    press = ["sinusoidal", "rope", "t5"]  # the schemes of Press et al.'s Fig. 1
    rows.add("alibi-press",
             "ALiBi extrapolates better than sinusoidal, rotary and T5 bias",
             "Press et al. 2022, Fig. 1",
             f"compared by the loss at {top}L, as their figure does",
             intervals=lambda c: {f"ALiBi − `{lab}` at {top}L": e.diff(
                 "alibi", lab, top, c) for lab in press}, predicts="negative",
             needs=("alibi", *press),
             by_rise=e.has("alibi", *press) and {
                 lab: e.rise_diff("alibi", lab) for lab in press})
    others = [lab for lab in e.labels if lab != "alibi" and len(e.values(lab, top))]
    rows.add("alibi-lowest", "ALiBi has the lowest loss past L of all schemes",
             "a common reading of Press et al. 2022",
             "a level, not an extrapolation: see the next row, and the reading below",
             intervals=lambda c: {lab: e.diff("alibi", lab, top, c) for lab in others},
             predicts="negative",
             evidence=lambda found: f"lower than ALiBi at {top}L: " + (", ".join(
                 f"`{lab}`" for lab, d in found.items()
                 if judge(d, "negative") == "contradicted") or "none") + "".join(
                 f"; ALiBi − `{lab}` at {top}L: {text(d)}" for lab, d in found.items()
                 if d["mean"] == max(x["mean"] for x in found.values())),
             needs=("alibi",))
    here, eight = alibi_slopes(e.num_heads).tolist(), alibi_slopes(8).tolist()
    missing = [s for s in eight if s > max(here)]
    rows.add("alibi-at-L",
             "At the training length, ALiBi matches or beats sinusoidal, rotary and "
             "T5 bias",
             "Press et al. 2022, §B.2",
             f"with H = {e.num_heads} heads ALiBi's slopes are {_fractions(here)}; "
             "an 8-head model also has the stronger, short-range "
             + _fractions(missing),
             intervals=lambda c: {f"ALiBi − `{lab}` at L": e.diff("alibi", lab, 1, c)
                                  for lab in press}, predicts="not higher",
             needs=("alibi", *press))
    rank = 1 + sum(e.rise[lab]["mean"] < e.rise["alibi"]["mean"] for lab in e.labels
                   if lab != "alibi")
    rows.add("alibi-rise", "ALiBi's loss does not rise past its training length",
             "Press et al. 2022, Fig. 1 and §B.2",
             "'does not rise' read with the rule's margin: a resolved rise can "
             "still lie inside it",
             intervals=lambda c: {"rise": e.change("alibi", 1, top, confidence=c)},
             predicts="not higher",
             evidence=lambda found: "a small rise, " + (
                 "resolved" if found["rise"]["lower"] > 0 else "not resolved")
             + f", from L to {top}L: {text(found['rise'])}, "
             + ("inside" if found["rise"]["upper"] < FLAT else "not inside")
             + f" the {FLAT} margin; the {ordinal(rank)} smallest of the "
             f"{len(e.labels)} rises by the means",
             needs=("alibi",))


def _rope_and_buckets(rows: _Rows, e: Edition) -> None:
    top = e.TOP
    rope = build_scheme("rope", d_model=e.d_model, num_heads=e.num_heads)
    slowest = 2 * math.pi / float(rope.inv_freq.min())
    rows.add("rope", "RoPE degrades past its training length",
             "Press et al. 2022, Fig. 1; the RoPE chapter",
             f"base {rope.base:g}, d_h = {rope.rotary_dim}: the slowest pair's "
             f"wavelength is {slowest:,.0f} positions, so it turns only part of a "
             "circle within L",
             intervals=lambda c: {f"rise from L to {top}L": e.change(
                 "rope", 1, top, confidence=c)}, predicts="positive", needs=("rope",))
    rows.add("rope-scaling", "RoPE extends with NTK-aware scaling or YaRN",
             "bloc97 2023; Peng et al. 2024", "—", decided="not tested here",
             evidence="no scaling runs in this study; the context-extension chapter "
             "tests them with one seed")
    for scheme, option, source in (
        ("t5", "max_distance",
         "Press et al. 2022, Fig. 1; the relative-positions chapter"),
        ("deberta", "max_position", "the relative-positions chapter"),
    ):
        variant = f"{scheme}, {option} = L"
        default = getattr(build_scheme(scheme, d_model=e.d_model,
                                       num_heads=e.num_heads), option)
        rows.add(f"{scheme}-buckets",
                 f"{scheme}'s bucketed relative positions degrade past L when their "
                 "range exceeds L (untrained buckets)", source,
                 "buckets are learned; the outer ones see few or no distances in "
                 "training",
                 intervals=lambda c, s=scheme: {f"rise from L to {top}L": e.change(
                     s, 1, top, confidence=c)}, predicts="positive",
                 evidence=lambda found, o=option, v=default: (
                     f"{o} = {v} = {v // e.L}L: rise from L to {top}L: "
                     + text(found[f"rise from L to {top}L"])),
                 needs=(scheme,))
        rows.add(f"{scheme}-range",
                 f"Setting {scheme}'s bucket range to L helps past L",
                 "the relative-positions chapter, one seed",
                 "the range also re-spaces the buckets inside L",
                 intervals=lambda c, s=scheme, v=variant: {
                     f"`{s}` − `{v}` at {top}L": e.diff(s, v, top, c)},
                 predicts="positive", needs=(scheme, variant))


def _nope_and_context(rows: _Rows, e: Edition) -> None:
    top = e.TOP
    absolute = ["sinusoidal", "learned", "rope", "t5"]
    rows.add("nope",
             "NoPE extrapolates better than absolute positions, RoPE and T5 bias",
             "Kazemnejad et al. 2023",
             "their tasks were synthetic reasoning with small decoders, here "
             "byte-level code; learned compared at its last length, 4L"
             + (" (its best rate lies at the edge of the sweep, so it may be "
                "under-tuned)" if e.has("learned") and e.at_edge("learned") else ""),
             intervals=lambda c: {
                 f"`none` − `{lab}` at {min(e.longest('none'), e.longest(lab))}L":
                 e.diff("none", lab, confidence=c) for lab in absolute},
             predicts="negative", needs=("none", *absolute),
             by_rise=e.has("none", *absolute) and {
                 lab: e.rise_diff("none", lab) for lab in absolute})
    rows.add("nope-alibi", "NoPE extrapolates better than ALiBi",
             "Kazemnejad et al. 2023",
             "consistent with their App. F code models, where past about 1.8× the "
             "training length NoPE's perplexity rose more than ALiBi's",
             intervals=lambda c: {f"`none` − `alibi` at {top}L": e.diff(
                 "none", "alibi", top, c)}, predicts="negative",
             needs=("none", "alibi"),
             by_rise=e.has("none", "alibi") and {"alibi": e.rise_diff("none", "alibi")})
    rows.add("context", "A flat perplexity curve means the extra context is used",
             "a common reading; Press et al. 2022 §B.2 already doubt it for ALiBi; "
             "tested in the ALiBi chapter",
             f"matched blocks start at least {top - 1}L into a file; flat (a rise "
             f"below the {FLAT} margin) allows a small, resolved rise",
             intervals=lambda c: {f"`{lab}`": e.change(lab, 1, top, "loss_matched", c)
                                  for lab in e.flat}, predicts="negative",
             evidence=lambda found: f"matched blocks, loss at {top}L − at L, for the "
             "flat models: "
             + "; ".join(f"{name} {text(d)}" for name, d in found.items()))


def retrieval(e: Edition) -> dict:
    """Who learned and kept which probe in ``e``: ``probed`` (the probe models'
    labels), ``learned`` and ``kept`` (``{(label, task): [seeds]}``: at L, and still
    at the longest length ``top[label]``), ``learners`` (labels that learned a probe
    with some seed), ``hidden`` (a flat language model whose probe model lost a
    learned probe) and ``intact`` (a rising language model whose every seed learned
    and kept a probe)."""
    probed = [lab for lab in e.labels if lab in set(e.probes["scheme"])]
    learned = {(lab, task): [s for s, a in e.accuracy(lab, task, 1).items()
                             if probe_learned(a, task)]
               for lab in probed for task in PROBES}
    top = {lab: max(m for m in MULTIPLES if len(e.accuracy(lab, "copy", m)))
           for lab in probed}
    kept = {key: [s for s in found if probe_learned(
        e.accuracy(key[0], key[1], top[key[0]])[s], key[1])]
        for key, found in learned.items()}
    return {
        "probed": probed, "learned": learned, "kept": kept, "top": top,
        "learners": sorted({lab for (lab, _), found in learned.items() if found}),
        "hidden": [key for key, found in learned.items()
                   if key[0] in e.flat and found and kept[key] != found],
        "intact": [key for key, found in learned.items()
                   if e.rise[key[0]]["lower"] > FLAT
                   and len(found) == len(e.preset["seeds"]) and kept[key] == found],
    }


def _retrieval(rows: _Rows, e: Edition) -> None:
    r = retrieval(e)
    probed, learned, kept, top = r["probed"], r["learned"], r["kept"], r["top"]
    hidden, intact, learners = r["hidden"], r["intact"], r["learners"]
    seeds = len(e.preset["seeds"])
    caveat = (f"{len(probed) - len(learners)} of the {len(probed)} probe models "
              f"learned no probe at all, {e.probe_rate()}; the probe models are "
              "separate models of the same scheme, trained on the probes")

    def evidence(pairs, what):
        by_label: dict[str, list] = {}
        for lab, task in pairs:
            by_label.setdefault(lab, []).append(task)
        return "; ".join(
            f"`{lab}`, {what} loss ({text(e.rise[lab])}): " + ", ".join(
                f"{task} learned at L by seeds "
                f"{', '.join(map(str, learned[(lab, task)]))}"
                f" of {seeds}, kept at {top[lab]}L by "
                + (", ".join(map(str, kept[(lab, task)])) or "none")
                + " (accuracy there " + ", ".join(
                    f"{e.accuracy(lab, task, top[lab])[s]:.2f}"
                    for s in learned[(lab, task)])
                + f"; floor {probe_floor(task):.2f})" for task in tasks)
            for lab, tasks in by_label.items()) or "—"

    rows.add("retrieval-flat", "A flat perplexity curve means retrieval works past L",
             "a common reading", caveat,
             decided=("contradicted" if hidden else "not resolved") + ACROSS,
             evidence=evidence(hidden, "flat"))
    rows.add("retrieval-rising",
             "A rising perplexity curve means retrieval fails past L",
             "a common reading", caveat,
             decided=("contradicted" if intact else "not resolved") + ACROSS,
             evidence=evidence(intact, "rising"))


def _memory(rows: _Rows, e: Edition) -> None:
    T, per = e.TOP * e.L, 4  # float32
    d_h = e.d_model // e.num_heads
    rows.add("memory", "Relative encodings are memory-heavy",
             "Shaw et al. 2018; the relative and ALiBi chapters",
             "the package's Shaw path never builds (T, T, d_h); see the cost chapter's "
             "measurements", decided="not tested here",
             evidence=f"computed from shapes, not measured: at T = {T}, float32, per "
             f"sequence and layer, the (H, T, T) scores take "
             f"{e.num_heads * T**2 * per / 2**20:.1f} MiB, a naive (T, T, d_h) "
             f"relative-key tensor {T**2 * d_h * per / 2**20:.1f} MiB")


def _newer_methods(rows: _Rows, e: Edition) -> None:
    top = e.TOP
    rivals = ["rope", "alibi", "kerple, log", "t5"]
    rows.add("fire",
             "FIRE's loss past L is lower than RoPE's, ALiBi's, Kerple's and T5's",
             "Li et al. 2024, §4",
             "their models were trained on C4 with subword tokens; here FIRE's "
             "threshold is L/4 (our scaling of their 512 at 2,048)",
             intervals=lambda c: {f"FIRE − `{lab}` at {top}L":
                                  e.diff("fire", lab, top, c) for lab in rivals},
             predicts="negative",
             needs=("fire", *rivals))
    rows.add("kerple", "Kerple's logarithmic kernel keeps its loss flat past L",
             "Chi et al. 2022, Table 3",
             "'flat' is our reading of their 'excellent extrapolation'; they trained "
             "at 512 tokens on OpenWebText2, GitHub and arXiv and scored to 32 times "
             "that; here the logarithmic kernel only (the power kernel was cut for the "
             "budget)",
             intervals=lambda c: {"rise": e.change("kerple, log", 1, top,
                                                   confidence=c)},
             predicts="not higher", needs=("kerple, log",))
    randomized = "rope, random positions"

    def drawn_minus_rope(c):
        drawn = e.values(randomized, top, "loss_sliding_drawn")
        rope = e.values("rope", top)
        return {f"`{randomized}` (drawn positions) − `rope` at {top}L":
                difference_interval((drawn - rope).dropna().tolist(), c)}

    rows.add("random-positions",
             "Training on randomized positions improves RoPE's length generalization",
             "Ruoss et al. 2023",
             "their models were encoder-only Transformers on 15 algorithmic tasks, "
             "scored by accuracy, not language models; scored here as they score it, "
             "on sorted positions drawn without replacement from [0, 32L), the range "
             "drawn from in training; on positions 0 … E − 1 it is also below RoPE "
             "at 8L in the second edition, by less, and far worse at L (see the "
             "second edition's chapter)",
             intervals=drawn_minus_rope, predicts="negative",
             needs=(randomized, "rope"))
    dropped, control = "drope, from rope", "rope, continued"
    rows.add("drope-long",
             "Dropping RoPE after training, then recalibrating briefly, extends the "
             "usable context past L (read here as: lowers the loss past L)",
             "Gelberg et al. 2026",
             "their evidence is mainly retrieval and long-context benchmarks, not "
             "loss; against the same extra training with RoPE kept; 100 steps (a "
             "tenth of training) at a third of RoPE's rate",
             intervals=lambda c: {f"DroPE − its control at {top}L": e.diff(
                 dropped, control, top, c)}, predicts="negative",
             needs=(dropped, control))
    rows.add("drope-at-L",
             "DroPE keeps the loss at the training length", "Gelberg et al. 2026",
             "they measure this with benchmark scores at the training length; against "
             "the same extra training with RoPE kept",
             intervals=lambda c: {"DroPE − its control at L": e.diff(
                 dropped, control, 1, c)}, predicts="not higher",
             needs=(dropped, control))


def ledger(edition: Edition) -> list[Claim]:
    """Every claim of the ledger, judged on ``edition`` (in the page's order)."""
    rows = _Rows(edition)
    for part in (_absolute_and_alibi, _rope_and_buckets, _nope_and_context,
                 _retrieval, _newer_methods, _memory):
        part(rows, edition)
    return list(rows)
