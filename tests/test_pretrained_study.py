"""The stored real-model study (posenc.pretrained_study): its grid, its stored results
with provenance, and a short stored run reproduced from scratch."""

from __future__ import annotations

import pytest
import torch

from posenc import pretrained_study


def test_the_real_model_study_grid_has_unique_keys():
    keys = [r.key() for r in pretrained_study.grid()]
    assert len(keys) == len(set(keys))
    assert set(pretrained_study.CHECKS) <= set(pretrained_study.grid())


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
    df = pretrained_study.load_results()
    assert set(df.method) == set(pretrained_study.methods())


def test_the_stored_short_runs_reproduce(smollm2):
    """The study's check, in the test tier: CHECKS rerun from scratch."""
    rows = pretrained_study.reproduce(*smollm2)
    assert len(rows) == len(pretrained_study.CHECKS)
    if not all(r["same_tokens"] for r in rows):
        pytest.skip("this Python's pydoc_data.topics differs from the one measured")
    assert all(r["ok"] for r in rows), rows


def test_bucket_means():
    values = torch.arange(10, dtype=torch.float32)
    assert pretrained_study.bucket_means(values, 4) == [1.5, 5.5, 8.5]
