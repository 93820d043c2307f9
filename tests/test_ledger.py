"""The claims ledger (posenc.experiments.ledger): its rule, its verdicts on the stored
first edition rebuilt from the per-seed values with SciPy, and a tiny second edition
judged end to end (the newer methods' claims tested there, the bucket-range claims
not)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

import posenc.experiments.study as study
from posenc.experiments import ledger
from posenc.experiments.study import load_results


def _d(lower, upper):
    return {"mean": (lower + upper) / 2, "lower": lower, "upper": upper}


def test_the_rule():
    assert ledger.judge(_d(0.1, 0.3), "positive") == "supported"
    assert ledger.judge(_d(0.1, 0.3), "negative") == "contradicted"
    assert ledger.judge(_d(-0.1, 0.3), "negative") == "not resolved"
    # "not higher": below the margin, wholly above it, or across it
    assert ledger.judge(_d(0.01, 0.04), "not higher") == "supported"
    assert ledger.judge(_d(0.06, 0.2), "not higher") == "contradicted"
    assert ledger.judge(_d(0.01, 0.06), "not higher") == "not resolved"
    with pytest.raises(ValueError, match="predicts"):
        ledger.judge(_d(0, 1), "lower")
    assert ledger.combine(["supported", "supported"]) == "supported"
    assert ledger.combine(["supported", "not resolved"]) == "not resolved"
    assert ledger.combine(["not resolved", "contradicted"]) == "contradicted"
    assert ledger.combine([]) == "not resolved"  # nothing compared supports nothing
    assert [ledger.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd"]


def test_series_names_a_list_in_words():
    assert ledger.series(["a"]) == "a"
    assert ledger.series(["a", "b"], mark="**") == "**a** and **b**"
    assert ledger.series(iter(["a", "b", "c"]), mark="`") == "`a`, `b` and `c`"
    with pytest.raises(ValueError, match="at least one part"):
        ledger.series([])


@pytest.fixture(scope="module")
def first():
    return ledger.Edition(load_results(strict=True), "cpu")


def test_the_first_editions_ledger(first):
    rows = ledger.ledger(first)
    by_key = {row.key: row for row in rows}
    assert len(by_key) == len(rows)
    # the newer methods are not in the first edition; its own claims all are
    newer = {"fire", "kerple", "random-positions", "drope-long", "drope-at-L"}
    assert {k for k, r in by_key.items() if r.verdict == ledger.NOT_TESTED} == newer
    for row in rows:  # an interval row's verdict is the rule's, at 95 %
        if row.intervals is not None:
            assert row.rejudged(0.95) == row.verdict, row.key
    # two intervals rebuilt from the per-seed losses with SciPy's t interval
    top = first.TOP
    rise = (first.values("alibi", top) - first.values("alibi", 1)).to_numpy()
    lo, hi = scipy_stats.t.interval(0.95, len(rise) - 1, loc=rise.mean(),
                                    scale=scipy_stats.sem(rise))
    (found,) = by_key["alibi-rise"].intervals(0.95).values()
    assert (found["lower"], found["upper"]) == pytest.approx((lo, hi))
    gap = (first.values("none", top) - first.values("alibi", top)).to_numpy()
    lo, _ = scipy_stats.t.interval(0.95, len(gap) - 1, loc=gap.mean(),
                                   scale=scipy_stats.sem(gap))
    (found,) = by_key["nope-alibi"].intervals(0.95).values()
    assert found["lower"] == pytest.approx(lo)
    # a stricter confidence can only widen the intervals: no supported sign claim
    # becomes contradicted
    for row in rows:
        if row.intervals is not None and row.verdict == "supported":
            assert row.rejudged(0.999) != "contradicted"


def test_a_tiny_second_edition_is_judged_end_to_end(tiny_study):
    schemes = ("none", "sinusoidal", "learned", "rope", "alibi", "t5")
    tiny_study(
        "tiny2l", "cpu2", schemes,
        model={"d_model": 8, "num_heads": 2, "num_layers": 1},
        train={"seq_len": 48, "batch_size": 2, "steps": 6, "warmup_steps": 1},
        long_block_every=512, probe_steps=6, probe_sequences=2,
        probe_schemes=("rope", "alibi"),
        base_sweep={"bases": (1e2,), "lengths": (48,), "seeds": (0,),
                    "probe_length": 48},
        drope={"schemes": ("rope",), "steps": 2, "warmup_steps": 1, "lr_ratio": 0.5},
    )
    study.run_study("s", preset="tiny2l", workers=0)
    edition = ledger.Edition(study.load_results("s", preset="tiny2l"), "tiny2l")
    assert "rope, base = 1e2" in set(edition.lm["scheme"])  # the base sweep is not a
    assert "rope, base = 1e2" not in edition.labels       # scheme of the ledger
    by_key = {row.key: row for row in ledger.ledger(edition)}
    untested = {k for k, r in by_key.items() if r.verdict == ledger.NOT_TESTED}
    # no bucket variants and no Shaw, DeBERTa or xPos in this edition
    assert untested == {"t5-range", "deberta-buckets", "deberta-range"}
    for key in ("fire", "kerple", "random-positions", "drope-long", "drope-at-L"):
        assert by_key[key].verdict in ("supported", "contradicted", "not resolved"), key
        assert by_key[key].rejudged(0.95) == by_key[key].verdict
    # randomized positions are judged on drawn positions, against RoPE seed by seed
    (found,) = by_key["random-positions"].intervals(0.95).values()
    drawn = edition.values("rope, random positions", edition.TOP, "loss_sliding_drawn")
    diff = (drawn - edition.values("rope", edition.TOP)).to_numpy()
    assert found["mean"] == pytest.approx(np.mean(diff))
    assert "each at the best of the rates" in by_key["retrieval-flat"].caveat
