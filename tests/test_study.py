"""The length-generalization study (posenc.experiments.study): its probes, its two evaluation
protocols against a naive loop, its statistics against scipy, its keys, resumability,
and the stored results against the current grid (stale results fail here).

The reproduction of stored values from scratch is `python -m posenc.experiments.study --check`
(`make study-check`, part of `make test`): it trains for minutes, so it is no unit
test."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats as scipy_stats

import posenc.experiments.study as study
import posenc.experiments.study_grid as study_grid
from posenc.book.quotes import Quotes
from posenc.experiments import lm_evaluation, probes, stats, store
from posenc.layers.model import ModelConfig, TinyLM
from posenc.schemes import chapter_schemes


@pytest.mark.parametrize("task", sorted(probes.PROBES))
@pytest.mark.parametrize("seq_len", [40, 64, 512])
def test_probe_batch_scores_exactly_the_answer(task, seq_len):
    g = torch.Generator().manual_seed(0)
    x, y, depth = probes.probe_batch(task, 64, seq_len, generator=g)
    assert x.shape == y.shape == (64, seq_len) and depth.shape == (64,)
    assert x.dtype == y.dtype == torch.int64
    assert ((0 <= depth) & (depth <= 1)).all()
    scored = y != -100
    answers = {"copy": 15, "associative_recall": 8, "passkey": 5}[task]
    assert (scored.sum(1) == answers).all()
    # y is x shifted by one: wherever both are defined they agree
    assert torch.equal(y[:, :-1][scored[:, :-1]], x[:, 1:][scored[:, :-1]])
    # every answer byte appeared earlier in the sequence (retrieval is possible) ...
    for b in range(8):
        for t in scored[b].nonzero().flatten().tolist():
            assert y[b, t] in x[b, : t + 1 - (1 if task != "copy" else 0)]
    # ... and is never a noise byte (the answer is unambiguous)
    lo, hi = probes._NOISE
    assert not ((y[scored] >= lo) & (y[scored] < hi)).any()


def test_probe_answer_is_where_the_needle_was():
    g = torch.Generator().manual_seed(1)
    x, y, depth = probes.probe_batch("passkey", 16, 200, generator=g)
    for b in range(16):
        start = (x[b] == probes._MARK).nonzero().flatten()
        assert len(start) == 1 and depth[b] == start[0] / 200
        key = x[b, start[0] + 1 : start[0] + 6]
        assert torch.equal(y[b][y[b] != -100], key)


@pytest.mark.parametrize(
    "task, seq_len, match",
    [("parity", 64, "task must be one of"), ("copy", 39, "seq_len must be >= 40")],
)
def test_probe_batch_rejects_bad_input(task, seq_len, match):
    with pytest.raises(ValueError, match=match):
        probes.probe_batch(task, 2, seq_len, generator=torch.Generator())


def _tiny(scheme="rope", **options):
    torch.manual_seed(0)
    cfg = ModelConfig(scheme=scheme, scheme_options=options, d_model=16, num_heads=2)
    return TinyLM(cfg).eval()


def _naive_block_losses(model, documents, L, E):
    """Every full block of every document scored by its own window, one at a time."""
    out = []
    for doc in documents:
        for end in range(L, doc.numel(), L):
            if end > doc.numel() - 1:
                break
            start = max(0, end - E)
            seq = doc[start : end + 1].long()[None]
            with torch.no_grad():
                loss = F.cross_entropy(
                    model(seq[:, :-1]).transpose(1, 2), seq[:, 1:], reduction="none"
                )
            out.append((end, float(loss[0, -L:].double().mean())))
    return out


def _play_guessers(task: str, sequences: int, seq_len: int, seed: int) -> dict[str, float]:
    """The two position-free guessers of probes.probe_floor, played on sequences of the
    generator: each sees the multiset of bytes before the target (and, the bag guesser,
    the answers it already gave), never their positions."""
    x, y, _ = probes.probe_batch(task, sequences, seq_len, generator=torch.Generator().manual_seed(seed))
    lo, hi = probes._VALUES if task == "associative_recall" else probes._SYMBOLS
    uniform, bag = [], []
    for row_x, row_y in zip(x.tolist(), y.tolist()):
        scored = [t for t, target in enumerate(row_y) if target != -100]
        u_hits, b_hits = [], []
        for t in scored:
            target = row_y[t]
            context = [b for b in row_x[: t + 1] if lo <= b < hi]
            distinct = set(context)
            u_hits.append((target in distinct) / len(distinct))
            counts = {b: context.count(b) for b in distinct}
            given = [row_y[s] for s in scored if s < t]
            if task == "copy":  # segment bytes already repeated occur twice
                candidates = {b: 1 for b, c in counts.items() if c == 1}
            else:  # every given answer occurs in the context twice: where it was, and as given
                candidates = {b: c - 2 * given.count(b) for b, c in counts.items()}
                candidates = {b: c for b, c in candidates.items() if c > 0}
            top = max(candidates.values())
            ties = [b for b, c in candidates.items() if c == top]
            b_hits.append((target in ties) / len(ties))
        uniform.append(sum(u_hits) / len(u_hits))
        bag.append(sum(b_hits) / len(b_hits))
    return {"uniform": float(np.mean(uniform)), "bag": float(np.mean(bag)), "sem": float(np.std(bag) / len(bag) ** 0.5)}


@pytest.mark.parametrize("task", sorted(probes.PROBES))
def test_probe_floors_are_what_position_free_guessers_score_on_the_generator(task):
    exact = probes.PROBE_FLOORS[task]()
    played = _play_guessers(task, sequences=1500, seq_len=64, seed=3)
    for guesser in ("uniform", "bag"):
        assert played[guesser] == pytest.approx(exact[guesser], abs=max(4 * played["sem"], 1e-9)), guesser
    assert probes.probe_floor(task) == exact["bag"] > exact["uniform"] > 1 / 32  # above the old 'chance'


def test_probe_floors_in_closed_form():
    assert probes.copy_floor() == {"uniform": 1 / 16, "bag": pytest.approx(sum(1 / k for k in range(1, 16)) / 15)}
    # one answer drawn from a alphabet: both guessers are always right
    assert probes._iid_floors(1, 32) == {"uniform": 1.0, "bag": 1.0}
    # two answers from two values: equal with probability 1/2 (then both right), else the uniform
    # guesser is right half the time and the bag guesser half the time on the first, always on the second
    assert probes._iid_floors(2, 2) == {"uniform": pytest.approx(0.5 + 0.5 * 0.5), "bag": pytest.approx(0.5 + 0.5 * 0.75)}
    assert sum(probes._pattern_probability(p, 32) for p in probes._set_partitions(5)) == pytest.approx(1.0)
    assert len(list(probes._set_partitions(5))) == 52  # the Bell number B5
    with pytest.raises(ValueError, match="task must be one of"):
        probes.probe_floor("needle")


def test_probe_learned_is_halfway_from_the_floor():
    floor = probes.probe_floor("passkey")
    assert probes.probe_learned(floor + (1 - floor) / 2, "passkey")
    assert not probes.probe_learned(floor + (1 - floor) / 2 - 1e-6, "passkey")


@pytest.mark.parametrize("scheme", ["rope", "sinusoidal", "shaw"])
def test_window_losses_match_a_naive_loop(scheme):
    g = torch.Generator().manual_seed(0)
    documents = [
        torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8)
        for n in (100, 37, 260)
    ]
    model, L = _tiny(scheme), 16
    got = lm_evaluation.window_losses(model, documents, L, (1, 2, 4), tokens_per_batch=64)
    for m in (1, 2, 4):
        naive = _naive_block_losses(model, documents, L, m * L)
        assert got["sliding"][m * L] == pytest.approx(
            np.mean([v for _, v in naive]), abs=1e-6
        )
        matched = [v for end, v in naive if end - L >= 3 * L]
        assert got["matched"][m * L] == pytest.approx(np.mean(matched), abs=1e-6)
    assert got["blocks"] == len(_naive_block_losses(model, documents, L, L))
    assert len(got["position"]) == 4 * L


def test_window_losses_on_drawn_positions():
    """drawn_positions = N gives every forward pass sorted, distinct positions from
    0 … N − 1 (as randomized-position training draws them); with N equal to the
    window, the only draw is 0 … E − 1, and the losses are the contiguous ones."""
    g = torch.Generator().manual_seed(0)
    documents = [torch.randint(0, 256, (200,), generator=g, dtype=torch.uint8)]
    model, seen = _tiny("rope"), []
    forward = model.forward

    def spy(x, positions=None, **kw):
        seen.append((x.shape[1], None if positions is None else positions.clone()))
        return forward(x, positions, **kw)

    model.forward = spy
    plain = lm_evaluation.window_losses(model, documents, 16, (1,))
    same = lm_evaluation.window_losses(model, documents, 16, (1,), drawn_positions=16)
    assert same["sliding"][16] == pytest.approx(plain["sliding"][16], abs=1e-6)
    seen.clear()
    drawn = lm_evaluation.window_losses(model, documents, 16, (1, 2), drawn_positions=512)
    assert seen and all(p is not None for _, p in seen)
    for length, p in seen:
        assert p.shape == (length,) and bool((p.diff() > 0).all()) and int(p.max()) < 512
    assert any(int(p.max()) >= 32 for _, p in seen)  # not 0 … T − 1
    assert drawn["sliding"][16] != pytest.approx(plain["sliding"][16], abs=1e-6)
    again = lm_evaluation.window_losses(model, documents, 16, (1, 2), drawn_positions=512)
    assert again["sliding"] == drawn["sliding"]  # seeded


def test_window_losses_sample_blocks_and_skip_lengths_past_a_learned_table():
    g = torch.Generator().manual_seed(0)
    documents = [torch.randint(0, 256, (300,), generator=g, dtype=torch.uint8)]
    full = lm_evaluation.window_losses(_tiny(), documents, 16, (1,))
    every3 = lm_evaluation.window_losses(_tiny(), documents, 16, (1,), block_every=3)
    assert every3["blocks"] == math.ceil(full["blocks"] / 3)
    learned = _tiny("learned", max_len=32)
    got = lm_evaluation.window_losses(learned, documents, 16, (1, 2, 4))
    assert sorted(got["sliding"]) == [16, 32]


def test_mean_ci_is_the_student_t_interval():
    values = [2.1, 2.3, 2.2, 2.6]
    mean, lo, hi = stats.mean_ci(values)
    ref = scipy_stats.t.interval(
        0.95, len(values) - 1, loc=np.mean(values), scale=scipy_stats.sem(values)
    )
    assert (lo, hi) == pytest.approx(ref) and mean == pytest.approx(np.mean(values))
    assert all(math.isnan(v) for v in stats.mean_ci([1.0])[1:])


def _frame(rows):
    import pandas as pd

    return pd.DataFrame(rows, columns=["scheme", "seed", "value"])


def test_paired_difference_pairs_by_seed():
    # b is a + 1 with seed noise shared: the paired interval is exact and resolved,
    # although the schemes' own intervals overlap
    noise = [0.0, 5.0, -5.0]
    rows = [("a", s, n) for s, n in enumerate(noise)]
    rows += [("b", s, n + 1.0) for s, n in enumerate(noise)]
    got = stats.paired_difference(_frame(rows), "b", "a")
    assert got["mean"] == pytest.approx(1.0) and got["n"] == 3
    assert got["lower"] == pytest.approx(1.0) and got["resolved"]
    a, b = stats.mean_ci(noise), stats.mean_ci([n + 1 for n in noise])
    assert a[2] > b[1]  # unpaired intervals overlap
    unresolved = stats.paired_difference(
        _frame([("a", 0, 0.0), ("a", 1, 1.0), ("b", 0, 1.0), ("b", 1, 0.0)]), "a", "b"
    )
    assert not unresolved["resolved"]
    with pytest.raises(ValueError, match="share no seed"):
        stats.paired_difference(_frame([("a", 0, 1.0), ("b", 1, 1.0)]), "a", "b")


def test_change_is_a_schemes_rise_seed_by_seed():
    import pandas as pd

    rows = [("a", s, E, "loss_sliding", v) for s, (v1, v8) in enumerate(
        [(1.0, 1.5), (2.0, 2.5), (1.5, 2.1)]) for E, v in ((64, v1), (512, v8))]
    rows += [("a", 0, 64, "loss_matched", 9.0), ("learned", 0, 64, "loss_sliding", 1.0)]
    df = pd.DataFrame(rows, columns=["scheme", "seed", "eval_length", "metric", "value"])
    got = stats.change(df, "a", 64, 512, metric="loss_sliding")
    ref = stats.mean_ci([0.5, 0.5, 0.6])
    assert (got["mean"], got["lower"], got["upper"]) == pytest.approx(ref)
    assert got["resolved"] and got["n"] == 3
    assert stats.seed_values(df, "a", eval_length=512).tolist() == [1.5, 2.5, 2.1]
    assert stats.change(df, "learned", 64, 512, metric="loss_sliding") is None
    with pytest.raises(ValueError, match="several values per seed"):
        stats.seed_values(df, "a", eval_length=64)  # two metrics at seed 0


def test_keys_follow_the_configuration():
    corpus = study_grid.study_corpus()
    run = study_grid.StudyRun("lm", "t5", "t5", "{}", 0, 64, 3e-3)
    assert run.key(corpus) == study_grid.StudyRun(**json.loads(json.dumps(
        run.__dict__))).key(corpus)
    # an option spelled out at its default is the same run; another value is not
    default = study_grid.StudyRun("lm", "t5", "t5", '{"max_distance": 128}', 0, 64, 3e-3)
    other = study_grid.StudyRun("lm", "t5", "t5", '{"max_distance": 64}', 0, 64, 3e-3)
    assert default.key(corpus) == run.key(corpus) != other.key(corpus)
    for changed in ({"seed": 1}, {"lr": 1e-2}, {"kind": "probe"}, {"train_length": 256}):
        assert study_grid.StudyRun(**{**run.__dict__, **changed}).key(corpus) != run.key(
            corpus
        )


def test_the_grid_holds_every_registered_scheme():
    preset = study_grid.PRESETS["cpu"]
    lrs = dict.fromkeys(chapter_schemes(), 3e-3)
    runs = study_grid.main_runs(lrs)
    for kind in ("lm", "probe"):
        for scheme in chapter_schemes():
            seeds = {r.seed for r in runs if r.kind == kind and r.label == scheme}
            assert seeds == set(preset["seeds"]), (kind, scheme)
    assert len(preset["seeds"]) >= 3
    labels = {r.label for r in runs}
    assert set(study_grid.bucket_variants(64)) <= labels
    long = {r.label for r in runs if r.train_length == preset["long_length"]}
    assert long == set(preset["long_schemes"])
    assert {r.lr for r in runs if r.kind == "probe"} == {preset["probe_lr"]}
    sweep = study_grid.sweep_runs()
    assert {(r.scheme, r.lr) for r in sweep} == {
        (s, lr) for s in chapter_schemes() for lr in preset["learning_rates"]
    }


def test_the_grid_holds_the_variants_of_todays_models():
    preset = study_grid.PRESETS["cpu"]
    lrs = dict.fromkeys(chapter_schemes(), 3e-3)
    lrs["rope"] = 1e-2
    runs = study_grid.main_runs(lrs)
    variants = study_grid.pattern_variants(64, preset["model"]["num_layers"])
    assert {f"pattern: {name}" for name in study_grid.STUDY_LAYER_PRESETS} | {
        f"rope, p = {study_grid.P_ROPE_FRACTION}"
    } == set(variants)
    for label in variants:
        for kind in ("lm", "probe"):
            chosen = [r for r in runs if r.label == label and r.kind == kind]
            assert {r.seed for r in chosen} == set(preset["seeds"]), (label, kind)
            if kind == "lm":  # RoPE's swept learning rate
                assert {r.lr for r in chosen} == {1e-2}
    (llama4,) = [r for r in runs if r.label == "pattern: llama4" and r.seed == 0
                 and r.kind == "lm"]
    layers = llama4.configs()[0].layers
    # two layers: one chunked RoPE layer (chunk L/4), one NoPE layer with temperature
    assert [layer["scheme"] for layer in layers] == ["rope", "none"]
    assert layers[0]["chunk"] == 16
    assert layers[1]["query_temperature"]["floor_scale"] == 16
    (p_rope,) = [r for r in runs if r.label.startswith("rope, p") and r.seed == 0
                 and r.kind == "lm"]
    scheme = p_rope.configs()[0]
    assert scheme.scheme_options["scaling"]["rope_type"] == "proportional"
    # a uniform model's key does not depend on the layers field
    uniform = study_grid.StudyRun("lm", "rope", "rope", "{}", 0, 64, 3e-3)
    assert "layers" not in uniform.configs()[0].to_dict()


@pytest.fixture
def tiny_preset(tiny_study, monkeypatch):
    monkeypatch.setattr(study_grid, "bucket_variants", lambda L: {})
    monkeypatch.setattr(study_grid, "pattern_variants", lambda L, n: {})
    return tiny_study(
        "tiny",
        "cpu",
        ("none", "alibi"),
        train={"seq_len": 64, "batch_size": 2, "steps": 2, "warmup_steps": 1},
        learning_rates=(1e-3, 3e-3),
        long_schemes=("none",),
        long_seeds=(0,),
        long_block_every=2048,
        probe_steps=2,
        probe_sequences=4,
    )


def test_the_study_resumes_and_its_results_load(tiny_preset):
    with pytest.raises(store.StaleResultsError, match="make study"):
        study.load_results("s", preset="tiny")
    first = study.run_study("s", preset="tiny", workers=0)
    folder = tiny_preset / "s-tiny"
    files = sorted(folder.glob("*.json"))
    # 2 schemes × 2 learning rates, 2 schemes × 2 seeds × (lm, probe), 1 long run
    assert first["runs"] == len(files) == 4 + 8 + 1
    again = study.run_study("s", preset="tiny", workers=0)
    assert again["wall_seconds"] == 0.0  # nothing left to compute
    df = study.load_results("s", preset="tiny")
    for column in ("scheme", "seed", "train_length", "eval_length", "task", "metric",
                   "value"):
        assert column in df.columns
    assert set(df["task"]) == {"language_modeling", *probes.PROBES}
    record = json.loads(files[0].read_text())
    for field in ("posenc", "torch", "cpu", "date", "wall_seconds"):
        assert field in record["provenance"]
    assert record["model"]["head_dim"] == 8 and "d_head" not in record["model"]
    # a stale file (a run no longer in the grid) is pruned; a missing one is stale
    (folder / "lm-old-s0-L64-0000.json").write_text("{}")
    next(folder.glob("lm-*.json")).unlink()
    with pytest.raises(store.StaleResultsError, match="1 of 13 runs"):
        study.load_results("s", preset="tiny")
    assert len(study.load_results("s", preset="tiny", strict=False)) > 0
    study.run_study("s", preset="tiny", workers=0)
    assert not (folder / "lm-old-s0-L64-0000.json").exists()
    assert len(list(folder.glob("*.json"))) == 13


def test_the_stored_study_covers_the_current_grid():
    """Fails when a scheme, its defaults, the corpus or the study's configuration
    changed since `make study` last ran (the book build fails the same way)."""
    records = study.load_records()
    assert len(records) == len(study.grid())
    df = study.load_results()
    lm = df[(df["kind"] == "lm") & (df["train_length"] == 64)]
    for scheme in chapter_schemes():
        got = lm[lm["scheme"] == scheme]
        assert set(got["seed"]) >= {0, 1, 2}, scheme
        assert got["eval_length"].max() >= 8 * 64 or scheme == "learned", scheme
    probe_rows = df[df["task"] != "language_modeling"]
    assert set(probe_rows["task"]) == set(probes.PROBES)
    assert np.isfinite(df["value"]).all()


def test_stored_results_load_on_another_python(monkeypatch):
    """The stdlib differs between Python versions (Colab): the stored study still loads,
    its keys checked with the stored corpus's identity; reproducing it here refuses
    with the reason."""
    other = study_grid.CorpusIdentity("python-stdlib-recursive", "0" * 16)
    monkeypatch.setattr(study, "study_corpus", lambda: other)
    assert len(study.load_records()) == len(study.grid())
    with pytest.raises(store.StaleResultsError, match="cannot be reproduced here"):
        study.reproduce()


def test_quotes_put_paired_intervals_into_words():
    import pandas as pd

    rows = [("a", s, "lm", 64, 64 * m, "loss_sliding", v)
            for s, by_m in enumerate([{1: 1.0, 8: 1.5}, {1: 2.0, 8: 2.6}, {1: 3.0, 8: 3.4}])
            for m, v in by_m.items()]
    df = pd.DataFrame(rows, columns=["scheme", "seed", "kind", "train_length",
                                     "eval_length", "metric", "value"])
    q = Quotes(df, train_length=64)
    d = q.change("a", 8)
    assert d["mean"] == pytest.approx(0.5) and d["n"] == 3
    assert (d["lower"], d["upper"]) == pytest.approx(stats.mean_ci([0.5, 0.6, 0.4])[1:])
    assert q.moves(d).startswith("rises by 0.500 [")
    flat = {"mean": 0.001, "lower": -0.01, "upper": 0.012, "n": 3, "resolved": False}
    assert q.moves(flat) == ("changes by +0.001 [-0.010, +0.012] nats per byte "
                             "(not resolved with 3 seeds)")
    assert q.number(-0.0004, sign=True) == "-0.0004"
    assert q.names(["x", "y", "z"]) == "`x`, `y` and `z`"


def _loss_frame(values_by_seed):
    import pandas as pd

    rows = [("a", s, "lm", 64, 64 * m, "loss_sliding", v)
            for s, by_m in enumerate(values_by_seed) for m, v in by_m.items()]
    return pd.DataFrame(rows, columns=["scheme", "seed", "kind", "train_length",
                                       "eval_length", "metric", "value"])


def test_quotes_change_is_guarded_where_no_interval_exists():
    """Quotes.change is paired_difference of the two lengths: with one seed the interval
    is NaN and the change is not resolved; where the two lengths share no seed (a scheme
    that cannot run at m·L) it raises instead of quoting a NaN mean."""
    q = Quotes(_loss_frame([{1: 1.0, 2: 1.25, 8: 1.5}]), train_length=64)
    d = q.change("a", 8)
    assert d["mean"] == pytest.approx(0.5) and d["n"] == 1
    assert math.isnan(d["lower"]) and math.isnan(d["upper"]) and d["resolved"] is False
    assert q.change("a", 8, base=2)["mean"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match=r"'a' has no seed scored at both 4·L and 1·L"):
        q.change("a", 4)
    with pytest.raises(ValueError, match="must differ"):
        q.change("a", 1)


def test_quotes_change_keeps_the_stored_values():
    """On the stored study, the paired change is the seed-by-seed difference it always
    was (mean and Student-t interval of loss at m·L minus loss at L)."""
    q = Quotes()
    compared = 0
    for scheme in q.lm["scheme"].unique():
        for m in (2, 4, 8):
            for metric in ("loss_sliding", "loss_matched"):
                diff = (q.values(scheme, m, metric) - q.values(scheme, 1, metric)).dropna()
                if diff.empty:
                    continue
                mean, lower, upper = stats.mean_ci(diff)
                d = q.change(scheme, m, metric=metric)
                assert (d["mean"], d["lower"], d["upper"]) == pytest.approx(
                    (mean, lower, upper), rel=1e-12, abs=1e-15), (scheme, m, metric)
                assert d["n"] == len(diff)
                assert d["resolved"] == bool(lower > 0 or upper < 0)
                compared += 1
    assert compared > 50


def test_quotes_reads_either_edition():
    """``Quotes(preset=...)`` loads that edition's stored runs at its own L; an unknown
    preset is named in the error."""
    second = Quotes(preset="cpu2", strict=False)
    assert second.preset == "cpu2"
    assert second.train_length == study_grid.PRESETS["cpu2"]["train"]["seq_len"]
    assert set(second.lm["key"]) <= set(study._stored("length_generalization", "cpu2"))
    assert not set(second.lm["key"]) & set(Quotes().lm["key"])
    with pytest.raises(ValueError, match="'cpu3'"):
        Quotes(preset="cpu3")


def test_stored_keys_are_their_runs_keys_and_old_records_say_head_dim():
    """A record's key (and file name) is recomputed from its run alone, with the
    stored corpus's identity; records stored with ``d_head`` load with ``head_dim``."""
    folder = store.results_dir("length_generalization")
    raw = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
    corpus = study_grid.stored_corpus(raw)
    kinds = {}
    for name, rec in raw.items():
        kinds.setdefault(rec["run"]["kind"], []).append((name, rec))
    sample = [pair for pairs in kinds.values() for pair in pairs[:2]]
    assert {rec["run"]["kind"] for _, rec in sample} == {"sweep", "lm", "probe"}
    for name, rec in sample:
        run = study_grid.StudyRun(**rec["run"])
        assert run.key(corpus) == rec["key"] == name
        model_cfg = run.configs()[0]
        upgraded = study.upgrade_record(rec)["model"]
        assert "d_head" not in upgraded
        assert upgraded["head_dim"] == model_cfg.d_model // model_cfg.num_heads
    assert any("d_head" in rec["model"] for rec in raw.values())  # old records
    loaded = study.load_records()
    assert all("head_dim" in r["model"] and "d_head" not in r["model"] for r in loaded)
    with pytest.raises(ValueError, match="both 'd_head' and 'head_dim'"):
        study.upgrade_record({"key": "k", "model": {"d_head": 4, "head_dim": 4}})
    assert study.upgrade_record({"key": "k"}) == {"key": "k"}


def test_the_stored_gpu_runs_belong_to_its_sweep():
    """The GPU preset's stored runs (book/design.md, 'Where the runs were computed'): each
    is a run of its learning-rate sweep, computed on CUDA; every scheme swept at all three
    of its first rates did best at 3e-3, the reason its sweep gained 1e-2."""
    corpus = study_grid.study_corpus()
    records = study._stored("length_generalization", "gpu")
    sweep = {run.key(corpus): run for run in study_grid.sweep_runs("gpu")}
    assert records and set(records) <= set(sweep)
    assert {rec["provenance"]["device"] for rec in records.values()} == {"cuda"}
    loss = {}
    for key, rec in records.items():
        (value,) = [r["value"] for r in rec["rows"] if r["metric"] == "loss_sliding"]
        loss.setdefault(sweep[key].label, {})[sweep[key].lr] = value
    complete = {lab: by_lr for lab, by_lr in loss.items() if set(by_lr) >= {3e-4, 1e-3, 3e-3}}
    assert len(complete) >= 7
    assert all(min(by_lr, key=by_lr.get) == 3e-3 for by_lr in complete.values())
    assert 1e-2 in study_grid.PRESETS["gpu"]["learning_rates"]
