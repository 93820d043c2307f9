"""The real-model study of the attention-level methods (posenc.experiments.remap_study):
its settings obey the methods' own bounds, the passkey prompt is what it says, and a run
of the study's code path on SmolLM2 (short) gives the model's own losses where the method
cannot act and other losses where it does."""

from __future__ import annotations

import pytest
import torch

from posenc.experiments import pretrained_study as ps
from posenc.experiments import remap_study as rs
from posenc.layers import pretrained
from posenc.remap import self_extend_max_length


def test_the_settings_fit_the_trained_length():
    methods = rs.attention_methods(8192)
    se = methods["self_extend"]
    assert self_extend_max_length(8192, group_size=se["group_size"], window_size=se["window_size"]) >= rs.LENGTH
    dca = methods["dual_chunk"]  # ChunkLlama's defaults: chunk_size 6144, local_window 1024 in its code
    assert (dca["chunk_size"], dca["pretraining_length"], dca["local_window"]) == (5120, 6145, 1025)
    assert methods["rerope"]["window"] == 1024


def test_the_4l_runs_are_yarn_and_self_extend_set_for_4l():
    assert rs.LONG_METHODS["yarn_4l"]["factor"] * 8192 == rs.LONG_LENGTH
    assert rs.LONG_METHODS["yarn_4l"] == {**ps.methods()["yarn"], "factor": 4.0}  # only the factor differs
    se_2l, se_4l = rs.attention_methods()["self_extend"], rs.LONG_METHODS["self_extend_4l"]
    assert se_4l == {**se_2l, "group_size": 2 * se_2l["group_size"]}  # G doubles with T, W stays
    settings = dict(group_size=se_4l["group_size"], window_size=se_4l["window_size"])
    assert self_extend_max_length(8192, **settings) >= rs.LONG_LENGTH  # every distance below L
    assert self_extend_max_length(8192, **{**settings, "group_size": se_2l["group_size"]}) < rs.LONG_LENGTH
    long_runs = [r for r in rs.grid() if r.tokens == rs.LONG_LENGTH]
    assert {(r.method, r.text) for r in long_runs} == {(m, t) for m in rs.LONG_METHODS for t in pretrained.TEXTS}


def test_the_grid_is_unique_and_names_known_methods():
    runs = rs.grid()
    assert len({r.key_hash() for r in runs}) == len(runs)
    passkey = [r for r in runs if r.experiment == "passkey"]
    controls = [r for r in passkey if r.tokens in rs.CONTROL_LENGTHS]
    assert max(rs.CONTROL_LENGTHS) <= 8192 and {r.method for r in controls} == {"none"}
    assert len(passkey) == (len(ps.methods()) + 3 + len(rs.CONTROL_LENGTHS)) * len(rs.DEPTHS) * rs.KEYS
    with pytest.raises(ValueError, match="unknown method 'selfextend'"):
        rs.method_settings("selfextend")


def test_passkeys_are_fixed_five_digit_numbers():
    keys = rs.passkeys()
    assert keys == rs.passkeys() and len(set(keys)) == rs.KEYS
    assert all(10_000 <= k < 100_000 for k in keys)


def test_the_passkey_prompt(smollm2):
    _, tokenizer = smollm2
    key = rs.passkeys()[0]
    starts = []
    for depth in rs.DEPTHS:
        ids, answer = rs.passkey_ids(tokenizer, 600, depth, key)
        text = tokenizer.decode(ids)
        assert len(ids) == 600 and text.endswith(f"The pass key is {key}.")
        assert tokenizer.decode(ids[-answer:]).strip() == f"{key}."
        starts.append(text.index(f"The pass key is {key}. Remember"))
    assert starts == sorted(starts) and starts[0] < len(text) * 0.2 < starts[1] < len(text) * 0.8 < starts[2]
    with pytest.raises(ValueError, match="depth must be a fraction"):
        rs.passkey_ids(tokenizer, 600, 1.5, key)
    with pytest.raises(ValueError, match="cannot hold"):
        rs.passkey_ids(tokenizer, 10, 0.5, key)


def test_the_study_path_on_smollm2(smollm2):
    """Inside SelfExtend's window the method is the model's own RoPE (same losses as the
    frequency path with no scaling); with the check's short window it acts."""
    model, tokenizer = smollm2
    ids = pretrained.text_tokens(tokenizer, pretrained.prose_text()[:20_000], max_tokens=300)
    with torch.no_grad():
        own = rs.method_losses(model, ids, "none")
        inside = rs.method_losses(model, ids, "self_extend")  # W = 2048 > 300: every pair a neighbour
        acting = rs.method_losses(model, ids, "self_extend_check")  # W = 256 < 300
    assert (inside - own).abs().max().item() < 2e-3
    assert (acting[256:] - own[256:]).abs().max().item() > 1e-3


def test_the_stored_study_covers_its_grid_and_reads_as_tables():
    """The stored runs (computed on a GPU, the check run on the CPU) cover the grid; the
    tables read them: nine methods, two texts, two ranges; five keys per depth."""
    records = rs.load_records()
    assert len(records) == len(rs.grid())
    ext = rs.extension_table()
    assert ext.shape == (len(ps.methods()) + 3, 4) and bool((ext > 1).all().all())
    # the stored frequency runs are the ones the real-model chapter quotes
    df = ps.load_real_model_results()
    assert ext.loc["yarn", ("prose", "[L, 2L)")] == ps.range_perplexity(
        df, text="prose", method="yarn", start=8192, stop=16384)
    long = rs.long_table()
    assert long.shape == (len(rs.LONG_METHODS), 8) and bool((long > 1).all().all())
    assert list(long.columns.get_level_values(1)[:4]) == ["[0, L)", "[L, 2L)", "[2L, 3L)", "[3L, 4L)"]
    keys = rs.passkey_table()
    assert set(keys["keys"]) == {rs.KEYS}
    assert len(keys) == (len(ps.methods()) + 3 + len(rs.CONTROL_LENGTHS)) * len(rs.DEPTHS)
    assert set(keys.loc[keys["tokens"].isin(rs.CONTROL_LENGTHS), "method"]) == {"none"}
    assert bool(((keys["min_p"] <= keys["mean_p"]) & (keys["mean_p"] <= keys["max_p"])).all())


def test_relative_time_is_per_method_against_the_unscaled_pass():
    relative, devices = rs.relative_time()
    assert relative["none"] == 1.0 and set(relative) == set(ps.methods()) | set(rs.attention_methods())
    assert len(devices) == 1  # every timed 2L pass on one device: the ratios compare like with like
