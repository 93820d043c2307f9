"""The stored real-model study (posenc.experiments.pretrained_study): its grid, its stored results
with provenance, and a short stored run reproduced from scratch."""

from __future__ import annotations

import pytest
import torch

from posenc.experiments import pretrained_study


def test_the_real_model_study_grid_has_unique_keys():
    keys = [r.key() for r in pretrained_study.grid()]
    assert len(keys) == len(set(keys))
    assert set(pretrained_study.CHECK_RUNS) <= set(pretrained_study.grid())


def test_the_stored_real_model_study_covers_its_grid():
    records = pretrained_study.load_records()
    assert len(records) == len(pretrained_study.grid())
    for record in records:
        assert {
            "torch",
            "transformers",
            "gguf",
            "python",
            "cpu",
            "date",
            "seconds",
            "tokens_fingerprint",
        } <= set(record["provenance"])
        tokens = record["config"]["tokens"]
        assert len(record["results"]["bucket_loss"]) == -(-(tokens - 1) // 64)
    df = pretrained_study.load_real_model_results()
    assert set(df[df.experiment != "streaming"].method) == set(pretrained_study.methods())
    assert set(df[df.experiment == "streaming"].method) == set(pretrained_study.STREAMING)
    runs = pretrained_study.stored_provenance()
    assert [r["run"] for r in runs] == [r.label for r in pretrained_study.grid()]
    assert all("seconds" in r and "date" in r for r in runs)


def test_the_stored_short_runs_reproduce(smollm2):
    """The study's check, in the test tier: CHECK_RUNS rerun from scratch."""
    rows = pretrained_study.reproduce(*smollm2)
    assert len(rows) == len(pretrained_study.CHECK_RUNS)
    if not all(r["same_tokens"] for r in rows):
        pytest.skip("this Python's pydoc_data.topics differs from the one measured")
    assert all(r["ok"] for r in rows), rows


def test_bucket_means():
    values = torch.arange(10, dtype=torch.float32)
    assert pretrained_study.bucket_means(values, 4) == [1.5, 5.5, 8.5]


def test_the_stored_runs_agree_where_they_overlap():
    """A causal model's loss at position t depends only on tokens 0 … t + 1: the unscaled
    16K run's first 8192 positions are the first 8K chunk, and the 1024-token check run is
    their start (every full bucket, to the bit on the machine that stored them)."""
    df = pretrained_study.load_real_model_results()
    unscaled = df[df.method == "none"]

    def buckets(experiment, text, chunk, below):
        rows = unscaled[
            (unscaled.experiment == experiment)
            & (unscaled.text == text)
            & (unscaled.chunk == chunk)
            & (unscaled.position < below)
        ]
        return torch.tensor(rows.sort_values("position").loss.to_numpy())

    for text in ("prose", "code"):
        first = buckets("context", text, 0, 8192 - 64)
        extended = buckets("extension", text, 0, 8192 - 64)
        torch.testing.assert_close(extended, first, rtol=0, atol=1e-4)
    check = buckets("check", "prose", 0, 1024 - 64)
    torch.testing.assert_close(check, buckets("context", "prose", 0, 1024 - 64), rtol=0, atol=1e-4)


def test_range_perplexity_weights_each_position_once():
    import math

    import pandas as pd

    from posenc.experiments.pretrained_study import BUCKET, range_perplexity

    # one run of 2·BUCKET tokens: 2·BUCKET − 1 predictions, the last bucket one short
    df = pd.DataFrame([
        {"experiment": "extension", "text": "prose", "tokens": 2 * BUCKET, "chunk": 0, "method": "none",
         "position": 0, "loss": 1.0},
        {"experiment": "extension", "text": "prose", "tokens": 2 * BUCKET, "chunk": 0, "method": "none",
         "position": BUCKET, "loss": 2.0},
    ])
    expected = math.exp((BUCKET * 1.0 + (BUCKET - 1) * 2.0) / (2 * BUCKET - 1))
    assert range_perplexity(df, text="prose", method="none", start=0, stop=2 * BUCKET) == pytest.approx(expected)
    assert range_perplexity(df, text="prose", method="none", start=BUCKET, stop=2 * BUCKET) == pytest.approx(math.e**2)
    with pytest.raises(ValueError, match="multiples of"):
        range_perplexity(df, text="prose", method="none", start=1, stop=BUCKET)
    with pytest.raises(ValueError, match="no stored"):
        range_perplexity(df, text="code", method="none", start=0, stop=BUCKET)
