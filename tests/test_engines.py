"""The engines tier (posenc.experiments.engines, issue 42): the case matrix is what the
issue lists and each row is computable by posenc; the stored records cover the matrix at
the current settings (``--verify``, as ``make test`` runs it) and are consistent with
the cases as defined now (their calls, their tolerances); an engine that cannot run a row
says where in its code. The engines themselves run in their own environments
(``make engines``, ``make engines-check``), never here."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from posenc.experiments import store
from posenc.experiments.engines import cases as C
from posenc.experiments.engines import tier


def test_the_matrix_has_the_rows_the_issue_lists():
    rows = {c.name: c for c in C.CASES}
    types = {name: c.rope_parameters["rope_type"] for name, c in rows.items()}
    assert {"default", "dynamic", "yarn", "llama3", "longrope", "linear"} <= set(types.values())
    # YaRN plain, with DeepSeek's mscale/mscale_all_dim, with gpt-oss's truncate
    assert rows["yarn-deepseek"].rope_parameters["mscale_all_dim"] == 1.0
    assert rows["yarn-gpt-oss"].rope_parameters["truncate"] is False
    assert rows["yarn"].rope_parameters["factor"] == 4.0
    assert rows["partial"].rotary_dim == rows["partial"].head_dim // 2
    assert {c.layout for c in C.CASES} == {"half", "interleaved"}
    assert rows["mrope-interleaved"].rope_parameters["mrope_interleaved"] is True
    assert {rows["gemma3-sliding"].layer_type, rows["gemma3-full"].layer_type} == {
        "sliding_attention", "full_attention"}


@pytest.mark.parametrize("c", C.CASES, ids=lambda c: c.name)
def test_each_row_has_three_schedules_placed_against_its_original_context(c):
    length = c.original_length
    plan = C.calls(c)
    image = ["image"] * 3 if c.mrope_section else []  # M-RoPE: text, image, text
    assert [s for s, _, _ in plan] == ["inside", "far", "kv", "kv", "kv", "kv", *image]
    inside, far = plan[0][1], plan[1][1]
    assert inside + C.TOKENS <= length < far
    # the KV cache: the prefill ends before L, the decode steps cross it one by one
    prefill, *steps = [(o, t) for s, o, t in plan if s == "kv"]
    assert prefill[0] + prefill[1] == length - 1
    assert [o for o, _ in steps] == [length - 1, length, length + 1]
    for x, (_, offset, tokens) in zip(C.inputs(c), plan):
        assert x.shape == (1, C.HEADS, tokens, c.head_dim) and x.dtype == torch.float32
        y = C.reference(c, x, offset)
        assert y.shape == x.shape and torch.isfinite(y).all()
        assert C.tolerance(c, x, offset) > 0


@pytest.mark.parametrize("name", ["mrope", "mrope-interleaved"])
def test_m_rope_rows_rotate_an_image_by_its_three_axes(name):
    """The image schedule's prefill has ids that differ between the axes (a text run, an
    image of 3 x 4 patches, a text run), continuing from the largest id; its reference
    is posenc's M-RoPE, which differs from rotating the temporal ids alone, and its
    (cos, sin) match transformers' own module within the tolerance."""
    c = C.case(name)
    plan = [call for call in C.calls(c) if call[0] == "image"]
    (_, start, tokens), (_, after, one), _ = plan
    ids = C.positions(c, start, tokens)
    assert ids.shape == (3, tokens) and not torch.equal(ids[1], ids[2])
    assert after == int(ids.max()) + 1 and one == 1
    k = C.calls(c).index(plan[0])
    x = C.inputs(c)[k]
    temporal = C.apply_rope(x, ids[0], inv_freq=C._frequencies(c, after)[0])
    ours = C.reference(c, x, start)
    assert (ours - temporal).abs().max() > 100 * C.tolerance(c, x, start)
    theirs = C.transformers_cos_sin(C.transformers_rotary(c), c, x, start)
    for a, b in zip(theirs, C.reference_cos_sin(c, x, start)):
        assert (a - b).abs().max() <= C.cos_sin_tolerance(c, x, start)


def test_a_row_whose_settings_change_gets_another_key():
    c = C.case("yarn")
    other = dataclasses.replace(c, overrides=(*c.overrides, ("beta_fast", 16)))
    assert other.key() != c.key()
    with pytest.raises(KeyError, match="the matrix has"):
        C.case("nope")


def test_the_tolerance_is_the_float32_rounding_of_the_angle():
    c = C.case("default")
    x = torch.zeros(1, 1, 2, c.head_dim)
    x[..., 0] = 3.0
    x[..., 1] = 4.0  # ‖x‖ = 5
    # positions 9, 10: m = 10, θ_max = 1 (pair 0)
    assert C.tolerance(c, x, 9) == pytest.approx(4 * 2**-24 * 5 * (10 * 1.0 + 1))


def test_the_stored_records_cover_the_matrix_and_agree_with_it():
    records = tier.stored()  # raises StaleResultsError when a row is missing or stale
    assert len(records) == len(tier.ENGINES) * len(C.CASES)
    for r in records:
        c = C.case(r["case"])
        engine = tier.ENGINES[r["engine"]]
        assert r["key"] == c.key() and r["pins"] == engine.pins()
        if r["status"] == "unsupported":
            assert r["case"] in engine.unsupported and r["code"] and r["why"]
            continue
        assert r["status"] == "compared"
        assert [(e["schedule"], e["offset"], e["tokens"]) for e in r["calls"]] == [
            tuple(call) for call in C.calls(c)]
        tolerance = {"rotated q": C.tolerance, "cos/sin": C.cos_sin_tolerance}[r["compares"]]
        ratios, pair_ratios = [], []
        for e, x, (_, offset, _) in zip(r["calls"], C.inputs(c), C.calls(c)):
            if e.get("status") == "refused":  # a position the engine does not serve
                assert e["why"] and "max_abs" not in e
                continue
            assert e["tolerance"] == pytest.approx(tolerance(c, x, offset), rel=1e-12)
            assert e["ratio"] == pytest.approx(e["max_abs"] / e["tolerance"])
            ratios.append(e["ratio"])
            pair_ratios.append(e["pair_ratio"])
        assert r["worst_ratio"] == max(ratios, default=None)
        assert r["worst_pair_ratio"] == max(pair_ratios, default=None)
        if tier.differs(r):  # a difference comes with what might explain it
            assert set(r["hypotheses"]) == set(C.hypotheses(c))
        assert r["engine_versions"] and r["provenance"]["posenc"]


def test_a_missing_record_is_named_with_the_command_that_computes_it(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "RESULTS_ROOT", tmp_path)
    (tmp_path / tier.NAME).mkdir()
    first = C.CASES[0]
    store.write_json(tier.record_path("mlx", first.name),
                     {"key": "stale", "case": first.name, "engine": "mlx"})
    with pytest.raises(store.StaleResultsError,
                       match=f"mlx/{first.name}.*run `make engines` .*engines.tier"):
        tier.stored("mlx")
    assert tier.main(["--verify", "--engine", "mlx"]) == 1


def test_an_engine_without_its_environment_says_make_engines(tmp_path):
    with pytest.raises(FileNotFoundError, match="make engines"):
        tier.run_engine(tier.ENGINES["mlx"], [C.case("default")], root=tmp_path)


def test_mlx_marks_m_rope_unsupported_and_names_its_code():
    records = {r["case"]: r for r in tier.unsupported_records(tier.ENGINES["mlx"])}
    assert set(records) == {"mrope", "mrope-interleaved"}
    for r in records.values():
        assert r["status"] == "unsupported"
        assert "rope_utils.py: initialize_rope" in r["code"] and "position" in r["why"]


def test_transformers_is_recomputed_here_and_agrees_with_posenc_on_every_row():
    """The transformers column needs no other environment: a row's stored record comes
    back when it is computed again, and every row agrees within the tolerance."""
    engine = tier.ENGINES["transformers"]
    stored = {r["case"]: r for r in tier.stored("transformers")}
    for name in tier.CHECK_CASES:
        again = tier.run_engine(engine, [C.case(name)])[0]
        assert [e["max_abs"] for e in again["calls"]] == pytest.approx(
            [e["max_abs"] for e in stored[name]["calls"]], rel=1e-9, abs=1e-12)
    assert all(r["status"] == "compared" and not tier.differs(r) for r in stored.values())


def test_a_record_computed_with_other_pins_is_stale(tmp_path, monkeypatch):
    """Changing an engine's requirements file (a new mlx-lm) makes its records stale."""
    engine = tier.ENGINES["mlx"]
    records = tier.stored("mlx")
    monkeypatch.setattr(store, "RESULTS_ROOT", tmp_path)
    (tmp_path / tier.NAME).mkdir()
    for r in records:
        store.write_json(tier.record_path("mlx", r["case"]), r)
    assert len(tier.stored("mlx")) == len(C.CASES)
    other = tmp_path / "requirements-mlx.txt"
    other.write_text((tier.HERE / engine.requirements).read_text() + "mlx-lm==0.33.0\n")
    monkeypatch.setattr(tier, "HERE", tmp_path)
    assert engine.pins() != records[0]["pins"]
    with pytest.raises(store.StaleResultsError, match=f"{len(C.CASES)} of {len(C.CASES)}"):
        tier.stored("mlx")


def test_the_model_route_gives_mlx_lm_the_config_as_transformers_5_saves_it(tmp_path):
    """mlx-model builds each row's rope through mlx-lm's own model file, from the
    config.json transformers 5.23 writes: RoPE under rope_parameters only, the layer
    of the row's type (Gemma 3's first full-attention layer is its sixth)."""
    engine = tier.ENGINES["mlx-model"]
    request = tier._request(engine, [C.case("llama3"), C.case("gemma3-full")], tmp_path)
    llama, gemma = (case["model"] for case in request["cases"])
    assert llama["model_type"] == "llama" and llama["layer_idx"] == 0
    assert llama["config"]["rope_parameters"]["rope_type"] == "llama3"
    assert "rope_scaling" not in llama["config"]
    assert gemma["model_type"] == "gemma3_text" and gemma["layer_idx"] == 5
    assert gemma["config"]["layer_types"][5] == "full_attention"
    assert engine.python() == tier.ENGINES["mlx"].python()  # one environment


def test_a_config_json_dict_is_refused_by_model_rotary_embedding():
    from posenc.open_models.config import model_rotary_embedding

    with pytest.raises(TypeError, match="config must be a transformers config instance, "
                                        "got dict"):
        model_rotary_embedding({"model_type": "llama"})


def test_the_released_route_gives_the_config_in_transformers_4s_keys(tmp_path):
    """mlx-released reads the config.json as checkpoints were released: Qwen3's YaRN
    under rope_scaling as its card says, Gemma 3's full-attention rule under
    rope_scaling with both bases at the top level, no rope_parameters."""
    engine = tier.ENGINES["mlx-released"]
    request = tier._request(engine, [C.case("yarn"), C.case("gemma3-full")], tmp_path)
    qwen, gemma = (case["model"] for case in request["cases"])
    assert qwen["config"]["rope_scaling"]["rope_type"] == "yarn"
    assert qwen["config"]["rope_scaling"]["factor"] == 4.0
    assert gemma["config"]["rope_scaling"] == {"rope_type": "linear", "factor": 8.0}
    assert gemma["config"]["rope_local_base_freq"] == 10000
    assert gemma["layer_idx"] == 5
    assert not any("rope_parameters" in case["model"]["config"]
                   for case in request["cases"])


def test_the_hypotheses_are_the_rotations_they_name():
    """Each alternative an engine is held against computes what its name says: inside
    L dynamic NTK is the unscaled rotation; past L LongRoPE is its long factors; the
    partial row's whole-head rotation moves the features the row passes through."""
    dynamic, longrope, partial = C.case("dynamic"), C.case("longrope"), C.case("partial")
    (_, inside, _), (_, far, _) = C.calls(dynamic)[:2]
    x = C.inputs(dynamic)[0]
    h = C.hypotheses(dynamic)
    assert torch.equal(h["unscaled"](x, inside), C.reference(dynamic, x, inside))
    assert not torch.allclose(h["unscaled"](x, far), C.reference(dynamic, x, far))
    x = C.inputs(longrope)[1]
    far = C.calls(longrope)[1][1]
    h = C.hypotheses(longrope)
    assert torch.equal(h["long factors throughout"](x, far), C.reference(longrope, x, far))
    inside = C.calls(longrope)[0][1]
    assert not torch.allclose(h["long factors throughout"](x, inside),
                              C.reference(longrope, x, inside))
    x = C.inputs(partial)[0]
    offset = C.calls(partial)[0][1]
    h = C.hypotheses(partial)
    tail = slice(partial.rotary_dim, None)
    assert torch.equal(C.reference(partial, x, offset)[..., tail], x[..., tail])
    assert not torch.allclose(h["whole head, unscaled"](x, offset)[..., tail], x[..., tail])
    assert set(C.hypotheses(C.case("default"))) == {"unscaled, base 10,000"}
    assert "truncated" in C.hypotheses(C.case("yarn-gpt-oss"))


def test_every_difference_is_explained_by_one_finding_that_the_numbers_bear_out():
    """The page's causes are held to the stored records: each finding names cells that
    differ, what it says the engine computes instead is within the tolerance there (or
    it says none of the hypotheses matches, and none does), and every cell that differs
    has exactly one finding."""
    from posenc.experiments.engines import findings as F

    records = {(r["engine"], r["case"]): r for r in tier.stored()}

    def refused(r):
        return any(e.get("status") == "refused" for e in r.get("calls", []))

    for f in F.FINDINGS:
        assert f.engine in tier.ENGINES and f.kind in ("deliberate", "bug", "not read")
        assert f.code and f.explanation and f.advice and f.title
        assert "`" not in f.code, "the page sets the code reference in backticks"
        assert f.about in ("differs", "refused")
        for name in f.cases:
            r = records[(f.engine, name)]
            if f.about == "refused":  # it agrees wherever it serves
                assert refused(r) and not tier.differs(r), (f.engine, name)
                continue
            assert tier.differs(r), (f.engine, name)
            ratios = r["hypotheses"]
            if f.computes is None:
                assert min(ratios.values(), default=2) > 1, (f.engine, name, ratios)
            else:
                assert ratios[f.computes] <= 1, (f.engine, name, f.computes, ratios)
    for (engine, name), r in records.items():
        differs = tier.differs(r)
        found = F.explaining(engine, name)
        assert [f.about for f in found] == ["differs"] * differs + ["refused"] * refused(r)
    # vLLM: the table holds every position the engine serves, except for dynamic NTK,
    # and LongRoPE is served at its original context
    for name in F.explaining("vllm", "default")[0].cases:
        report = records[("vllm", name)]["engine_report"]
        assert report["max_model_len"] <= report["table_rows"], name
    report = records[("vllm", "dynamic")]["engine_report"]
    assert report["max_model_len"] > report["table_rows"] == C.case("dynamic").original_length
    report = records[("vllm", "longrope")]["engine_report"]
    assert report["max_model_len"] == C.case("longrope").original_length
    # llama.cpp's GLM converter: base 10,000 and the hidden size as the context length
    keys = records[("llamacpp", "partial")]["engine_report"]["keys"]
    glm = C.case("partial")
    assert keys["chatglm.rope.freq_base"] == 10000 != glm.rope_parameters["rope_theta"]
    assert keys["chatglm.context_length"] == glm.config["hidden_size"] < glm.original_length
    with pytest.raises(KeyError, match="the tier has"):
        F.findings("sglang")
    with pytest.raises(KeyError, match="the tier has"):
        F.explaining("llama.cpp", "longrope")  # the column is "llamacpp"
    with pytest.raises(KeyError, match="the matrix has"):
        F.explaining("llamacpp", "LongRoPE")


def test_the_page_has_words_for_every_column_and_hypothesis():
    from posenc.experiments.engines import findings as F

    assert set(tier.ENGINES) <= set(F.COLUMNS)
    named = {name for c in C.CASES for name in C.hypotheses(c)}
    assert named == set(F.COMPUTES)


def test_the_cheat_sheet_links_the_page_from_each_symptom_a_finding_explains():
    import re
    from pathlib import Path

    from posenc.experiments.engines import findings as F

    page = (Path(__file__).parents[1] / "book" / "cheatsheet.md").read_text()
    sections = {m.group(1): m.group(2) for m in re.finditer(
        r"^\((cs-[\w-]+)\)=\n(.*?)(?=^\(cs-|\Z)", page, flags=re.M | re.S)}
    assert "{doc}`engines`" in sections["cs-engines"]
    for f in F.FINDINGS:
        assert f.symptom in sections, (f.engine, f.cases, f.symptom)
        assert "{ref}`engines-differences`" in sections[f.symptom], f.symptom
    # the causes the cheat-sheet names are the findings' (and so the stored numbers')
    named = {("llamacpp", "dynamic"): "unscaled", ("llamacpp", "yarn-gpt-oss"): "truncated",
             ("llamacpp", "longrope"): "one factor set per sequence",
             ("mlx", "longrope"): "long factors throughout",
             ("mlx-model", "llama3"): "unscaled, base 10,000",
             ("mlx-model", "gemma3-full"): "unscaled",
             ("mlx-released", "partial"): "whole head, unscaled",
             ("llamacpp", "partial"): "unscaled, base 10,000"}
    for (engine, case), computes in named.items():
        assert [f.computes for f in F.explaining(engine, case)] == [computes]
    assert [f.kind for f in F.explaining("vllm", "dynamic")] == ["bug"]


def test_the_per_pair_bound_sees_an_error_in_the_slowest_pairs_that_the_whole_head_misses():
    """Interleaved M-RoPE with its two leftover pairs unrotated (llama.cpp's rule): the
    error is far inside the whole-head tolerance, and thousands of per-pair bounds."""
    c = C.case("mrope-interleaved")
    x = C.inputs(c)[0]
    offset = C.calls(c)[0][1]
    theirs = C.hypotheses(c)["leftover pairs unrotated"](x, offset)
    ours = C.reference(c, x, offset)
    assert float((theirs - ours).abs().max()) < C.tolerance(c, x, offset)
    ratio = C.pair_errors(c, theirs, ours, c.layout) / C.pair_tolerance(c, x, offset)
    assert ratio.max() > 1000 and (ratio > 1).nonzero().flatten().tolist() == [61, 62]
    # and posenc against itself passes both
    assert C.pair_errors(c, ours, ours, c.layout).max() == 0
