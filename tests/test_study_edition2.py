"""The study's second edition (the ``cpu2`` preset, issue 27): its model, its grid
(probe-rate sweep, RoPE base sweep, randomized positions, DroPE, FIRE and Kerple), and
one tiny edition-2 study run end to end through the real runner."""

from __future__ import annotations

import json

import pytest
import torch

import posenc.experiments.study as study
import posenc.experiments.study_grid as study_grid
from posenc.alibi import alibi_slopes
from posenc.experiments import probes, store, study_cost
from posenc.layers.model import TinyLM
from posenc.rope import base_lower_bound
from posenc.schemes import chapter_schemes

CORPUS = study_grid.CorpusIdentity("python-stdlib-recursive", "0" * 16)
#: StudyRun("lm", "rope", "rope", "{}", 0, 64, 1e-2).key(CORPUS) at f0d9175, before
#: the second edition's fields (train_options, recalibration) existed.
PINNED_KEY = "lm-rope-s0-L64-3385655702ca3261"


def _grid(preset="cpu2"):
    lrs = dict.fromkeys(study_grid._swept(preset), 3e-3)
    lrs["rope"] = 1e-2
    probe_lrs = dict.fromkeys(study_grid.PRESETS[preset]["probe_schemes"], 1e-3)
    probe_lrs["alibi"] = 3e-4
    runs = study_grid.sweep_runs(preset) + study_grid.main_runs(lrs, preset, probe_lrs)
    return runs, lrs, probe_lrs


def test_the_second_editions_model_has_the_heads_and_layers_the_review_asked_for():
    model = study_grid.PRESETS["cpu2"]["model"]
    head_dim = model["d_model"] // model["num_heads"]
    assert model["num_heads"] >= 4 and head_dim >= 32 and model["num_layers"] >= 4
    # ALiBi's slopes at 4 heads: 1/4 … 1/256, without the paper's steepest 1/2
    slopes = alibi_slopes(model["num_heads"])
    assert torch.allclose(slopes, torch.tensor([1 / 4, 1 / 16, 1 / 64, 1 / 256]))
    assert 1 / 2 in alibi_slopes(8).tolist()
    # RoPE's frequency pairs per head, as the model builds them
    rope_cfg, _ = study_grid.StudyRun("lm", "rope", "rope", "{}", 0, 64, 1e-2,
                                      "cpu2").configs()
    assert TinyLM(rope_cfg).blocks[0].attn.scheme.inv_freq.numel() == 16
    # design.md's sizes: this model and the first edition's
    first, _ = study_grid.StudyRun("lm", "rope", "rope", "{}", 0, 64, 1e-2).configs()
    assert (TinyLM(rope_cfg).num_parameters(), TinyLM(first).num_parameters()) == (
        856_832, 132_352)
    # and Men et al.'s bound at the study's head size, as design.md quotes it
    assert [round(base_lower_bound(head_dim, n)) for n in (32, 64, 128)] == [
        108, 315, 1218]
    assert study_grid.edition("cpu2") == 2 and study_grid.edition("cpu") == 1


def test_the_second_editions_grid():
    runs, lrs, probe_lrs = _grid()
    preset = study_grid.PRESETS["cpu2"]
    L = preset["train"]["seq_len"]
    swept = study_grid._swept("cpu2")
    assert set(chapter_schemes()) | {"fire", "kerple, log"} == set(swept)
    # every swept label: language modelling × every seed at its own rate
    for label in swept:
        lm = [r for r in runs if r.kind == "lm" and r.label == label]
        assert {r.seed for r in lm} == set(preset["seeds"]), label
        assert {r.lr for r in lm} == {lrs[label]}
    # FIRE's threshold scaled to L (the paper's 512 at 2048), Kerple's log kernel
    (fire,) = {r.options for r in runs if r.label == "fire"}
    assert json.loads(fire) == {"init_threshold": L / 4}
    assert {r.scheme_options["kernel"] for r in runs if r.scheme == "kerple"} == {"log"}
    # probes: each probed label's sweep runs, then seeds at its best probe rate; the
    # best rate's seed 0 is the sweep's run (one key, stored once)
    for label in preset["probe_schemes"]:
        sweep = [r for r in runs if r.kind == "probe" and r.label == label
                 and r.seed == 0]
        assert {r.lr for r in sweep} == set(preset["probe_learning_rates"])
        main = [r for r in runs if r.kind == "probe" and r.label == label
                and r.lr == probe_lrs[label]]
        assert {r.seed for r in main} == set(preset["seeds"])
        keys = [r.key(CORPUS) for r in main if r.seed == 0]
        assert len(keys) == 2 and len(set(keys)) == 1
    # the base sweep: 4 bases × 3 lengths, base 1e4 at L being RoPE's own run
    bases = {(r.scheme_options.get("base"), r.train_length) for r in runs
             if r.label.startswith("rope, base")}
    wanted = {(b, n) for b in (1e2, 1e3, 1e4, 1e5) for n in (32, 64, 128)}
    assert bases == wanted - {(1e4, L)}
    assert study_grid.base_label(1e2) == "rope, base = 1e2"
    # Men et al.'s bound at each length falls between two swept bases, so the sweep
    # has a base below and above it: 1e2 < b(32), b(64) < 1e3 < b(128) < 1e4
    b32, b64, b128 = (base_lower_bound(32, n) for n in (32, 64, 128))
    assert 1e2 < b32 < b64 < 1e3 < b128 < 1e4
    # and it is probed (retrieval, as the paper tests the bound) at L, seed 0
    probed = {r.scheme_options.get("base") for r in runs if r.kind == "probe"
              and r.label.startswith("rope, base")}
    assert probed == {1e2, 1e3, 1e5}
    # randomized positions over [0, 32L) (the paper's range: about 4 times its longest
    # test length), scored on drawn positions too
    rp = [r for r in runs if r.label == "rope, random positions"]
    assert {r.configs()[1].random_positions for r in rp} == {32 * L}
    assert {r.evaluation()["drawn_positions"] for r in rp} == {32 * L}
    assert all("drawn_positions" not in r.evaluation() for r in runs
               if r.kind == "lm" and r not in rp)
    assert {r.seed for r in rp} == set(preset["seeds"])
    # DroPE from each RoPE seed, and its control (the same steps, the encoding kept)
    drop = [r for r in runs if r.label == "drope, from rope"]
    kept = [r for r in runs if r.label == "rope, continued"]
    assert {r.seed for r in drop} == {r.seed for r in kept} == set(preset["seeds"])
    rope = {r.seed: r for r in runs if r.kind == "lm" and r.label == "rope"}
    for run in drop + kept:
        assert run.drops_encoding == (run in drop)
        recal = run.recalibration_config()
        assert recal.seed == run.seed + study_grid.DROPE_SEED_OFFSET
        assert recal.steps == preset["drope"]["steps"]
        assert recal.lr == pytest.approx(lrs["rope"] * preset["drope"]["lr_ratio"])
        # its source is RoPE's main run of the same seed: the same training
        source = rope[run.seed]
        assert run.configs() == source.configs()
        assert run.key(CORPUS) != source.key(CORPUS)
    assert len({r.key(CORPUS) for r in drop + kept}) == 2 * len(preset["seeds"])
    # one key per run but the probed labels' seed-0 runs at their best rate, which
    # the sweep and the main grid share
    keys = {r.key(CORPUS) for r in runs}
    assert len(keys) == len(runs) - len(preset["probe_schemes"])
    # no 256-token rows, no Kerple power kernel, no CoPE (the budget's cuts)
    assert {r.train_length for r in runs} == {32, 64, 128}
    assert "cope" not in {r.scheme for r in runs}


def test_the_new_fields_leave_the_first_editions_keys_unchanged():
    """The new StudyRun fields enter a key only when set (the stored first-edition
    study still covering its grid is test_study's test_the_stored_study_covers_the_
    current_grid): a key computed before the fields existed, pinned."""
    run = study_grid.StudyRun("lm", "rope", "rope", "{}", 0, 64, 1e-2)
    assert run.recalibration_config() is None
    assert run.key(CORPUS) == PINNED_KEY


def test_the_probe_rate_is_the_one_that_learned_the_most_probes():
    """Learned (halfway from the floor to 1) counts first, then the mean accuracy above
    the floor as a share of what is above it, then the lower rate."""
    runs = [r for r in study_grid.sweep_runs("cpu2") if r.kind == "probe"]
    floor = {task: probes.probe_floor(task) for task in probes.PROBES}
    learned = {task: f + 0.6 * (1 - f) for task, f in floor.items()}
    half = {task: f + 0.3 * (1 - f) for task, f in floor.items()}
    # ALiBi: the lowest rate learns one probe (copy) and no more; the middle learns
    # none, but is higher on average above the floors: the count decides
    low, mid, high = study_grid.PRESETS["cpu2"]["probe_learning_rates"]
    none = {t: floor[t] for t in probes.PROBES}
    one = {**none, "copy": learned["copy"]}
    by_rate = {"alibi": {low: one, mid: half, high: none},
               "rope": {low: half, mid: learned, high: half},
               "fire": {low: half, mid: half, high: half}}  # a tie: the lowest rate
    records = {}
    for run in runs:
        acc = by_rate.get(run.label, by_rate["rope"])[run.lr]
        records[run.key(CORPUS)] = {"rows": [
            {"task": task, "metric": "accuracy", "eval_length": 64, "value": acc[task]}
            for task in probes.PROBES
        ] + [{"task": "copy", "metric": "accuracy", "eval_length": 128, "value": 1.0}]}
    assert sum(one.values()) / 3 < sum(half.values()) / 3
    best = study_grid.best_probe_rates(records, "cpu2", CORPUS)
    assert (best.pop("alibi"), best.pop("fire")) == (low, low)
    assert set(best.values()) == {mid}
    records.pop(runs[0].key(CORPUS))
    with pytest.raises(KeyError, match="missing"):
        study_grid.best_probe_rates(records, "cpu2", CORPUS)
    assert study_grid.best_probe_rates({}, "cpu", CORPUS) == {}
    with pytest.raises(ValueError, match="probe_lrs"):
        study_grid.main_runs({}, "cpu2")


@pytest.fixture
def tiny_edition2(tiny_study, monkeypatch):
    monkeypatch.setitem(study.CHECK_PREFIX, "tiny2", {
        "runs": (("lm", "rope", 0), ("probe", "rope", 0)), "steps": 10})
    return tiny_study(
        "tiny2",
        "cpu2",
        ("rope",),
        model={"d_model": 8, "num_heads": 2, "num_layers": 1},
        train={"seq_len": 48, "batch_size": 2, "steps": 10, "warmup_steps": 1},
        long_block_every=512,
        probe_steps=10,
        probe_sequences=2,
        probe_schemes=("rope",),
        base_sweep={"bases": (1e2, 1e4), "lengths": (48, 96), "seeds": (0,),
                    "probe_length": 48},
        drope={"schemes": ("rope",), "steps": 2, "warmup_steps": 1, "lr_ratio": 0.5},
    )


def test_a_tiny_second_edition_runs_end_to_end(tiny_edition2):
    first = study.run_study("s", preset="tiny2", workers=0)
    folder = tiny_edition2 / "s-tiny2"
    records = [json.loads(f.read_text()) for f in folder.glob("*.json")]
    # sweep: 3 labels × 3 rates + 1 probed × 3 rates; main: 3 × 2 seeds lm, 1 probed ×
    # seed 1 (seed 0 is the sweep's), base sweep 3 lm + 1 probe, random positions 2,
    # DroPE 2 and its control 2
    assert first["runs"] == len(records) == 9 + 3 + 6 + 1 + 4 + 2 + 2 + 2
    by_label = {}
    for rec in records:
        by_label.setdefault(rec["run"]["label"], []).append(rec)
    for rec in by_label["drope, from rope"]:
        assert rec["evaluated_scheme"] == "none"
        assert rec["recalibration"]["steps"] == 2
        assert rec["recalibration"]["seed"] == rec["run"]["seed"] + 1000
        assert rec["source_from_cache"]  # its source is RoPE's own stored run
    for rec in by_label["rope, continued"]:
        assert rec["evaluated_scheme"] == "rope" and rec["source_from_cache"]
        assert rec["recalibration"]["lr"] == pytest.approx(rec["run"]["lr"] / 2)
    for rec in by_label["rope, random positions"]:
        assert rec["train"]["random_positions"] == 32 * 48
        metrics = {row["metric"] for row in rec["rows"]}
        assert {"loss_sliding_drawn", "loss_matched_drawn"} <= metrics
    assert {rec["run"]["train_length"] for rec in by_label["rope, base = 1e2"]} == {
        48, 96}
    assert {rec["run"]["train_length"] for rec in by_label["rope, base = 1e4"]} == {96}
    assert study.run_study("s", preset="tiny2", workers=0)["wall_seconds"] == 0.0
    df = study.load_results("s", preset="tiny2")
    assert {"drope, from rope", "rope, continued", "fire", "kerple, log"} <= set(
        df["scheme"])
    # one value per scheme, seed, length, task and metric among the main runs; the
    # probe rate not chosen is kind "probe_sweep"
    main = df[df["kind"].isin(["lm", "probe"])]
    cell = ["scheme", "seed", "train_length", "eval_length", "task", "metric"]
    assert not main.duplicated(cell).any()
    probed = df[(df["scheme"] == "rope") & (df["task"] != "language_modeling")]
    assert set(probed["kind"]) == {"probe", "probe_sweep"}
    assert probed[probed["kind"] == "probe_sweep"]["seed"].eq(0).all()
    # the check: the first 10 steps of RoPE's language modelling and of its probes at
    # the chosen rate, rerun from scratch, give the stored curve (here in this
    # process: the workers would not know the tiny preset)
    rows = study.reproduce_prefix("s", preset="tiny2", workers=0)
    assert {(r["kind"], r["label"]) for r in rows} == {("lm", "rope"), ("probe", "rope")}
    assert all(r["ok"] and r["difference"] == 0 for r in rows), rows
    # a stored curve that is not what the run gives is caught
    (path,) = [f for f in folder.glob("lm-rope-s0-*.json")
               if json.loads(f.read_text())["run"]["label"] == "rope"]
    record = json.loads(path.read_text())
    record["train_loss"][0] += 2 * study.CHECK_TOLERANCE["loss"]
    path.write_text(json.dumps(record))
    bad = [r for r in study.reproduce_prefix("s", preset="tiny2", workers=0)
           if not r["ok"]]
    assert [(r["kind"], r["metric"]) for r in bad] == [("lm", "train_loss")]


def test_a_training_prefix_is_the_head_of_the_full_run(tiny_edition2):
    from posenc.experiments.study_cell import execute, training_prefix

    corpus = study_grid.study_corpus()
    for kind in ("lm", "probe"):
        run = study_grid.StudyRun(kind, "rope", "rope", "{}", 3, 48, 1e-3, "tiny2")
        full = execute(run, corpus, device="cpu")["train_loss"]
        assert training_prefix(run, 10, corpus) == full[:1]
    with pytest.raises(ValueError, match="multiple of 10"):
        training_prefix(run, 15, corpus)
    drop = study_grid.StudyRun("lm", "d", "rope", "{}", 0, 48, 1e-3, "tiny2",
                               recalibration='{"drop": true}')
    with pytest.raises(ValueError, match="source"):
        training_prefix(drop, 10, corpus)


def test_the_probe_pilot_says_what_design_md_says():
    """book/design.md's account of the pilot, against its stored records: at 2,000
    steps, 3e-3 stays below every floor, 1e-3 learns the passkey only, and the loss
    falls over the last 800 steps (ALiBi 1.81 to 1.34, RoPE 1.87 to 1.33)."""
    folder = store.RESULTS_ROOT / "length_generalization-cpu2-pilot"
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    assert len(records) == 4
    falls = {}
    for rec in records:
        assert rec["train"]["steps"] == 2000 and rec["run"]["seed"] == 0
        at_l = {r["task"]: r["value"] for r in rec["rows"]
                if r["metric"] == "accuracy" and r["eval_length"] == 64}
        if rec["run"]["lr"] == 3e-3:
            assert all(a < probes.probe_floor(t) for t, a in at_l.items())
        else:
            learned = {t for t, a in at_l.items() if probes.probe_learned(a, t)}
            assert learned == {"passkey"}
            falls[rec["run"]["label"]] = (rec["train_loss"][120], rec["train_loss"][199])
    assert {k: tuple(round(v, 2) for v in pair) for k, pair in falls.items()} == {
        "alibi": (1.81, 1.34), "rope": (1.87, 1.33)}


def test_the_tally_sums_the_stored_seconds_by_part(capsys):
    """``study --list`` 's tally (design.md's): per part its runs, the seconds stored
    and an estimate for the rest, from stored runs of the same sort, else of the same
    kind and length in another part (never across the scoring-only part)."""
    runs, _, _ = _grid()
    runs = list({r.key(CORPUS): r for r in runs}.values())  # as planned_runs lists them
    parts = [study_cost.run_part(r) for r in runs]
    assert parts.count("learning-rate sweep") == 12 * 3
    assert parts.count("probe-rate sweep") == 5 * 3
    assert parts.count("probes, seeds 1 and 2") == 5 * 2
    assert parts.count("base sweep") == 11 + 3
    assert parts.count("randomized positions, DroPE and its control") == 9
    sweep = [r for r in runs if r.kind == "sweep"]
    base = [r for r in runs if study_cost.run_part(r) == "base sweep"]
    lm_base = [r for r in base if r.kind == "lm" and r.train_length == 64]
    probe_sweep = [r for r in runs if study_cost.run_part(r) == "probe-rate sweep"]
    stored = {r.key(CORPUS): {"provenance": {"wall_seconds": s}}
              for r, s in zip(sweep, (100.0, 300.0))}
    stored[lm_base[0].key(CORPUS)] = {"provenance": {"wall_seconds": 50.0}}
    stored[probe_sweep[0].key(CORPUS)] = {"provenance": {"wall_seconds": 500.0}}
    study_cost.print_tally(runs, stored, CORPUS)
    lines = capsys.readouterr().out.splitlines()
    assert "| learning-rate sweep | 36 | 2 | 400 | 200 | 6,800 |" in lines
    # seeds 1 and 2 fall back to the base sweep's language model at L = 64, and their
    # probes to the probe-rate sweep's; the scoring-only runs have nothing to go by
    assert "| language modelling, seeds 1 and 2 | 24 | 0 | 0 | — | 1,200 |" in lines
    assert "| probes, seeds 1 and 2 | 10 | 0 | 0 | — | 5,000 |" in lines
    assert "| language modelling, seed 0 (scoring only) | 12 | 0 | 0 | — | ≥ 0 |" in lines
    # the base sweep: its other language models at L = 64 at 50 s, its probes at 500 s;
    # nothing to go by at its other lengths
    n = len(lm_base) - 1
    assert f"| base sweep | 14 | 1 | 50 | 50 | ≥ {50 * n + 3 * 500:,} |" in lines
    assert lines[-1].startswith(f"| total | {len(runs)} | 4 | 950 | | ≥ ")


def test_a_probe_accuracy_has_a_wilson_interval_over_its_scored_bytes():
    """Each probe sequence scores a fixed number of bytes, so a stored accuracy is a
    count of hits over n = sequences × scored bytes: the Wilson interval's input."""
    assert {t: probes.scored_bytes(t) for t in probes.PROBES} == {
        "copy": probes.COPY_SEGMENT - 1, "associative_recall": probes.RECALL_PAIRS,
        "passkey": probes.PASSKEY_LENGTH}
    sequences = study_grid.PRESETS["cpu2"]["probe_sequences"]
    folder = store.RESULTS_ROOT / "length_generalization-cpu2"
    rows = [r for p in folder.glob("probe-*.json")
            for r in json.loads(p.read_text())["rows"] if r["metric"] == "accuracy"]
    assert rows
    for r in rows:  # a whole number of hits, up to float32's rounding of the mean
        hits = r["value"] * sequences * probes.scored_bytes(r["task"])
        assert abs(hits - round(hits)) < 1e-2, r
    # Wilson's closed form at z = 1.96 (Agresti and Coull 1998, eq. 2)
    p, n, z = 0.5, sequences * 5, 1.959963984540054
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
    assert probes.probe_interval(p, "passkey", sequences) == pytest.approx(
        (centre - half, centre + half), abs=1e-9)
    low, high = probes.probe_interval(1.0, "copy", sequences)
    assert high == 1.0 and 0.98 < low < 1.0  # no wider than it must be at 100 %
    for bad, rule in ((1.5, "accuracy"), (-0.1, "accuracy")):
        with pytest.raises(ValueError, match=rule):
            probes.probe_interval(bad, "copy", sequences)
    with pytest.raises(ValueError, match="sequences"):
        probes.probe_interval(0.5, "copy", 0)
    with pytest.raises(ValueError, match="task"):
        probes.probe_interval(0.5, "recall", 10)


def test_the_stored_second_edition_covers_its_grid():
    """The book reads the second edition strictly: every run of its grid is stored, the
    language models of every swept scheme with 3 seeds."""
    records = study.load_records(preset="cpu2", strict=True)
    assert len(records) == len(study.grid("cpu2")) == 120  # the sweep is part of the grid
    df = study.load_results(preset="cpu2", strict=True)
    lm = df[(df["kind"] == "lm") & (df["train_length"] == 64)
            & ~df["scheme"].str.startswith("rope, base")]  # the base sweep has one seed
    assert lm.groupby("scheme")["seed"].nunique().min() == 3


def test_the_main_conditions_are_each_scheme_at_its_defaults_and_the_new_schemes():
    """``main_labels`` keeps what the loss tables compare: no bucket range, pattern,
    randomized positions, DroPE or base; FIRE and Kerple's log kernel stay."""
    df = study.load_results(preset="cpu2", strict=True)
    labels = list(dict.fromkeys(df.loc[df["kind"] == "lm", "scheme"]))
    main = study_grid.main_labels(labels, 64)
    assert set(main) == {"none", "alibi", "learned", "sinusoidal", "shaw", "transformer_xl",
                         "t5", "deberta", "rope", "xpos", "fire", "kerple, log"}
    assert main == [lab for lab in labels if lab in main]  # in the study's order
    assert study_grid.main_labels(["rope", "rope, continued"], 64) == ["rope"]
