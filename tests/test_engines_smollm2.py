"""SmolLM2 in llama.cpp against transformers (posenc.experiments.engines.smollm2, issue
42 "On a real model"): the stored records cover the grid at the current settings and
pins; the transformers numbers they were compared with are the stored
pretrained_study runs; every derived number (half means, differences, the table)
recomputes from the stored buckets. llama.cpp itself runs in its own environment
(``make engines``), never here."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from posenc.experiments import pretrained_study as P
from posenc.experiments import store
from posenc.experiments.engines import smollm2 as S


@pytest.fixture(scope="module")
def records():
    return S.stored()


def test_the_stored_records_cover_the_grid_at_the_current_settings(records):
    assert [(r["config"]["setting"], r["config"]["text"]) for r in records] == [
        (run.setting, run.text) for run in S.grid()]
    for record, run in zip(records, S.grid()):
        assert record["key"] == run.key() and record["pins"] == S.ENGINE.pins()
        assert record["config"] == run.config()
        assert record["engine"]["flags"] == S.SETTINGS[run.setting]
        assert len(record["llamacpp"]["bucket_loss"]) == math.ceil((S.TOKENS - 1)
                                                                  / S.BUCKET)


def test_a_changed_setting_makes_the_records_stale(monkeypatch):
    monkeypatch.setitem(S.SETTINGS, "yarn", {**S.SETTINGS["yarn"],
                                             "yarn_beta_fast": 16.0})
    with pytest.raises(store.StaleResultsError, match="yarn-prose"):
        S.stored()


def test_the_settings_are_the_transformers_methods_they_are_compared_with():
    methods = P.methods()
    assert methods["none"] is None and S.SETTINGS["none"] == {}
    for name in ("linear", "yarn"):
        flags = S.SETTINGS[name]
        assert 1 / flags["rope_freq_scale"] == methods[name]["factor"]
    yarn = methods["yarn"]
    assert S.SETTINGS["yarn"]["yarn_orig_ctx"] == yarn[
        "original_max_position_embeddings"] == S.ORIGINAL
    # posenc's (and transformers') YaRN defaults: β_fast 32, β_slow 1
    assert (S.SETTINGS["yarn"]["yarn_beta_fast"], S.SETTINGS["yarn"]["yarn_beta_slow"]
            ) == (32.0, 1.0)


def test_llamacpp_ran_the_rope_of_each_setting(records):
    """What llama.cpp's context logged: the frequency scale of the setting, the
    GGUF's base and context, and the full 2L context in one sequence."""
    for record in records:
        context, gguf = record["engine"]["context"], record["engine"]["gguf"]
        flags = record["config"]["flags"]
        assert float(context["freq_scale"]) == flags.get("rope_freq_scale", 1.0)
        assert float(context["freq_base"]) == float(gguf["llama.rope.freq_base"])
        assert int(gguf["llama.context_length"]) == S.ORIGINAL
        assert int(context["n_ctx_seq"]) == S.TOKENS
        assert int(context["n_batch"]) == int(context["n_ubatch"]) == S.N_BATCH


def test_the_transformers_numbers_are_the_stored_pretrained_study_runs(records):
    for record, run in zip(records, S.grid()):
        theirs = S.transformers_record(run)
        assert record["transformers"]["key"] == theirs["key"] == record["config"][
            "transformers_key"]
        assert record["transformers"]["bucket_loss"] == theirs["results"]["bucket_loss"]
        assert record["transformers"]["mean_loss"] == theirs["results"]["mean_loss"]
        assert (record["transformers"]["tokens_fingerprint"]
                == theirs["provenance"]["tokens_fingerprint"])


def test_half_means_weigh_each_bucket_by_its_positions():
    """Against the plain mean of per-token losses, bucketed as pretrained_study
    buckets them (the last bucket of 2L holds 63 positions)."""
    losses = torch.rand(S.TOKENS - 1, generator=torch.Generator().manual_seed(0),
                        dtype=torch.float64) * 5
    buckets = P.bucket_means(losses)
    inside, past = S.half_means(buckets)
    assert inside == pytest.approx(float(losses[: S.ORIGINAL].mean()), rel=1e-12)
    assert past == pytest.approx(float(losses[S.ORIGINAL :].mean()), rel=1e-12)
    assert S.weights(len(buckets))[-1] == S.BUCKET - 1


def test_the_derived_numbers_recompute_from_the_stored_buckets(records):
    df = P.load_real_model_results()
    for record in records:
        c = record["config"]
        for side in ("llamacpp", "transformers"):
            numbers = record[side]
            assert (numbers["mean_inside"], numbers["mean_past"]) == pytest.approx(
                S.half_means(numbers["bucket_loss"]), rel=1e-12)
            # the bucket means, weighted, give back the mean over every token
            w = S.weights(len(numbers["bucket_loss"]))
            assert np.average(numbers["bucket_loss"], weights=w) == pytest.approx(
                numbers["mean_loss"], rel=1e-9)
        # the transformers half means as pretrained_study reads its own runs
        for start, stop, name in ((0, S.ORIGINAL, "mean_inside"),
                                  (S.ORIGINAL, S.TOKENS, "mean_past")):
            ppl = P.range_perplexity(df, text=c["text"], method=c["setting"],
                                     start=start, stop=stop)
            assert math.log(ppl) == pytest.approx(record["transformers"][name],
                                                  rel=1e-12)
        ours = np.array(record["llamacpp"]["bucket_loss"])
        theirs = np.array(record["transformers"]["bucket_loss"])
        d = record["difference"]
        assert d == S.differences(ours, theirs)
        cut = S.ORIGINAL // S.BUCKET
        assert d["max_abs_inside"] == np.abs(ours - theirs)[:cut].max()
        assert d["mean_past"] == pytest.approx(
            record["llamacpp"]["mean_past"] - record["transformers"]["mean_past"],
            abs=1e-12)


def test_the_table_reads_each_difference_against_the_none_floor(records):
    rows = S.table(records)
    floors = {r["config"]["text"]: r["difference"]["max_abs_inside"]
              for r in records if r["config"]["setting"] == "none"}
    for row, record in zip(rows, records):
        assert row["floor"] == floors[row["text"]] > 0
        assert row["ratio_past"] == record["difference"]["max_abs_past"] / row["floor"]
        assert row["within"] == (row["ratio_past"] <= S.FLOOR_MULTIPLE)


def test_unscaled_llamacpp_scores_the_text_as_transformers_does_inside_l(records):
    """The same model: inside the trained context, without scaling, the quantized
    engine's mean loss is within 0.05 nats of transformers' (a mismatch of tokens,
    BOS or weights moves it by far more)."""
    for record in records:
        if record["config"]["setting"] == "none":
            assert abs(record["difference"]["mean_inside"]) < 0.05
