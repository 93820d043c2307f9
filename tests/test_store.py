"""The one store for stored results (posenc.experiments.store): folders, provenance, atomic writes,
resume and prune, the staleness message, the reproduction check and the command line
that the three studies share."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os

import pytest

from posenc.experiments import store


def test_results_dir_is_the_package_folder_and_checks_its_name():
    assert store.results_dir("vit_digits") == store.RESULTS_ROOT / "vit_digits"
    assert (store.RESULTS_ROOT / "length_generalization").is_dir()
    for bad in ("", "a/b", "../x"):
        with pytest.raises(ValueError, match="single folder name"):
            store.results_dir(bad)


def test_provenance_keeps_its_keys():
    record = store.provenance()
    assert list(record) == ["posenc", "torch", "python", "cpu", "threads", "date"]
    assert isinstance(record["threads"], int) and record["date"].endswith("+00:00")
    commit = store.git_commit()
    assert commit is None or (commit and all(c in "0123456789abcdef" for c in commit))


def test_write_json_is_atomic_and_keeps_the_format(tmp_path, monkeypatch):
    path = tmp_path / "new" / "a.json"
    store.write_json(path, {"b": [1, 2]})
    assert path.read_text() == '{"b": [1, 2]}\n'
    store.write_json(path, {"b": 1}, indent=1)
    assert path.read_text() == '{\n "b": 1\n}\n'
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.json"]

    # a write that fails half-way leaves the old record whole
    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        store.write_json(path, {"b": 2})
    assert json.loads(path.read_text()) == {"b": 1}


def test_resume_and_prune(tmp_path):
    store.write_json(tmp_path / "k1.json", {"key": "k1"})
    store.write_json(tmp_path / "name-k2.json", {"key": "k2"})
    store.write_json(tmp_path / "old.json", {})
    (tmp_path / "half.tmp").write_text("{")  # an interrupted write is not a record
    assert list(store.read_records(tmp_path)) == ["k1", "name-k2", "old"]
    by_key = store.read_records(tmp_path, key_field="key")
    assert list(by_key) == ["k1", "k2", "old"]  # without the field: its file name
    assert store.read_records(tmp_path / "none") == {}
    runs = ["k1", "k2", "k3"]
    assert store.missing_runs(runs, by_key, key=lambda r: r) == ["k3"]
    assert store.prune(tmp_path, {"k1.json", "name-k2.json"}) == ["old.json"]
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["k1.json", "name-k2.json"]
    assert store.prune(tmp_path, {"k1.json", "name-k2.json"}) == []


def test_the_staleness_message_names_the_runs_and_the_command(tmp_path):
    stored = {"a": {"n": 1}, "c": {"n": 3}}
    runs = list("abcdefghi")
    kwargs = dict(key=str, label=lambda r: f"run {r}", study="study 'x'",
                  command="python -m posenc.x")
    with pytest.raises(store.StaleResultsError) as err:
        store.grid_records(runs, stored, strict=True, where=tmp_path, **kwargs)
    assert str(err.value) == (
        "the stored study 'x' is stale: 7 of 9 runs have no stored result for the "
        "current configuration (run b, run d, run e, run f, run g, run h, ...) in "
        f"{tmp_path}; run `make study` (python -m posenc.x)"
    )
    assert store.grid_records(runs, stored, strict=False, **kwargs) == [
        {"n": 1}, {"n": 3}
    ]
    assert store.grid_records(["c", "a"], stored, strict=True, **kwargs) == [
        {"n": 3}, {"n": 1}
    ]
    short = store.stale_error("real-model study", ["r"], 2, "make it")
    assert str(short).endswith("(r); run `make study` (make it)")


def _square(x: int) -> dict:
    return {"x": x, "square": x * x}


def test_compute_here_and_in_workers_store_every_run():
    got = []
    store.compute([1, 2, 3], _square, lambda r, rec: got.append((r, rec)), workers=0)
    assert got == [(r, _square(r)) for r in (1, 2, 3)]
    here = []
    store.compute([4], _square, lambda r, rec: here.append(rec), workers=0,
                  here=lambda r: {"here": r})
    assert here == [{"here": 4}]
    pooled = []
    # a spawned worker process; each record handed back here as its run ends
    store.compute([5, 6], _square, lambda r, rec: pooled.append((r, rec)), workers=1)
    assert sorted(pooled, key=lambda p: p[0]) == [(5, _square(5)), (6, _square(6))]
    with pytest.raises(ValueError, match="workers"):
        store.worker_pool(0)


def test_the_reproduction_check_compares_within_the_tolerance(capsys):
    ok = store.compare(1.0, 1.01, 0.02, run="a")
    assert ok == {"run": "a", "stored": 1.0, "recomputed": 1.01,
                  "difference": pytest.approx(0.01), "tolerance": 0.02, "ok": True}
    off = store.compare(1.0, 0.97, 0.02, run="b")
    assert not off["ok"] and off["difference"] == pytest.approx(-0.03)
    assert store.report([ok], "headline") == 0
    assert capsys.readouterr().out == "headline\n"
    assert store.report([ok, off], "headline") == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "headline" and out[1].startswith("NOT REPRODUCED: {'run': 'b'")
    assert len(out) == 2


def _parse(argv):
    parser = argparse.ArgumentParser()
    store.add_arguments(parser, check="the sample")
    return parser.parse_args(argv)


def test_the_command_line_plumbing(capsys):
    assert vars(_parse([])) == {"list": False, "verify": False, "check": False}
    calls = []

    def load():
        return [{"seconds": 2}, {"seconds": 3}]

    def summary(records):
        return f"{len(records)} runs, {sum(r['seconds'] for r in records)} s"

    def check():
        calls.append("check")
        return 1

    assert store.verify_or_check(_parse([]), load, summary, check) is None
    assert store.verify_or_check(_parse(["--verify"]), load, summary, check) == 0
    assert capsys.readouterr().out == "2 runs, 5 s\n" and calls == []
    assert store.verify_or_check(_parse(["--check"]), load, summary, check) == 1
    assert calls == ["check"]

    def stale():
        raise store.stale_error("study 'x'", ["a"], 1, "python -m posenc.x")

    assert store.verify_or_check(_parse(["--check"]), stale, summary, check) == 1
    captured = capsys.readouterr()
    assert "python -m posenc.x" in captured.err and "1 runs" not in captured.out
    assert calls == ["check"]  # a stale study is not rerun

    store.print_listing(["k1", "k2"], {"k2"}, key=str, label=lambda r: r.upper())
    assert capsys.readouterr().out == (
        "missing k1  K1\nstored  k2  K2\n1 of 2 runs stored\n"
    )
    records = {k: {"provenance": {"wall_seconds": s}} for k, s in (("k1", 3), ("k2", 5))}
    store.print_listing(["k1", "k2", "k3"], records, key=str, label=str)
    assert capsys.readouterr().out.splitlines()[-1] == (
        "2 of 3 runs stored, 8 s when computed (4 s each)"
    )


@pytest.mark.parametrize(
    "module",
    [
        "posenc.experiments.study",
        "posenc.experiments.vit_study",
        "posenc.experiments.pretrained_study",
        "posenc.experiments.remap_study",
        "posenc.book.prepare",
    ],
)
def test_every_reproduction_check_names_its_sample_and_tolerance_alike(module):
    """One name per thing: each stored tier's ``--check`` reruns ``CHECK_RUNS`` and
    compares within ``CHECK_TOLERANCE`` (a number, or a number per metric)."""
    import importlib

    mod = importlib.import_module(module)
    assert len(mod.CHECK_RUNS) >= 1
    tolerances = (
        mod.CHECK_TOLERANCE.values()
        if isinstance(mod.CHECK_TOLERANCE, dict)
        else [mod.CHECK_TOLERANCE]
    )
    assert all(isinstance(t, float) and 0 < t < 0.1 for t in tolerances)
    for old in ("TOLERANCE", "CHECKS", "CHECK_SAMPLE", "REPRODUCE_TOLERANCE"):
        assert not hasattr(mod, old), f"{module}.{old}: the name is CHECK_*"


def test_a_real_model_study_runs_the_protocol_in_one_place(tmp_path, monkeypatch, capsys):
    """store.RealModelStudy, the runner of pretrained_study and remap_study, with a fake
    model: compute what is missing (prune, limit, progress lines), the records and their
    staleness, the check (tokens compared or not) and the command line."""
    monkeypatch.setattr(store, "RESULTS_ROOT", tmp_path)
    runs = ["a", "b", "c"]
    loads = []

    def execute(run, model, tokenizer, cache=None):
        shift = model if run == "a" else 0.0
        return {
            "key": run,
            "results": {"bucket_loss": [1.0 + shift, 2.0]},
            "provenance": {"seconds": 2.0, "tokens_fingerprint": tokenizer},
        }

    def load_model(device=None):
        loads.append(device)
        return 0.0, "tokens"

    study = store.RealModelStudy(
        name="fake", grid=lambda: list(runs), key=str, execute=execute,
        load_model=load_model, check_runs=("a",), tolerance=0.01,
        command="python -m fake", study="fake study", label=str.upper,
        progress=lambda record: f": {record['results']['bucket_loss'][1]:.1f}",
    )
    study.folder.mkdir()
    (study.folder / "gone.json").write_text("{}\n")
    assert study.compute_missing(limit=2, device="cuda") == 2 and loads == ["cuda"]
    assert capsys.readouterr().out == "[1/2] A: 2.0 in 2 s\n[2/2] B: 2.0 in 2 s\n"
    assert sorted(p.name for p in study.folder.iterdir()) == ["a.json", "b.json"]
    with pytest.raises(store.StaleResultsError, match=r"1 of 3 runs .*\(C\).*python -m fake"):
        study.records()
    assert [r["key"] for r in study.records(strict=False)] == ["a", "b"]
    assert study.main(["--verify"], description="d", check="c") == 1
    assert "fake study is stale" in capsys.readouterr().err
    assert study.main([], description="d", check="c") == 0 and loads == ["cuda", None]
    assert capsys.readouterr().out.endswith(f"computed 1 run(s); results in {study.folder}\n")
    assert study.main(["--verify"], description="d", check="c") == 0
    assert capsys.readouterr().out == "the stored fake study covers its grid: 3 runs, 6 s when computed\n"

    assert study.reproduce(2**-7, "tokens") == [{"run": "A", "difference": 2**-7, "ok": True}]
    assert study.reproduce(0.5, "tokens")[0]["ok"] is False
    other = dataclasses.replace(study, compare_tokens=True, title="fake")
    assert other.reproduce(0.5, "other") == [
        {"run": "A", "same_tokens": False, "difference": 0.5, "ok": True}
    ]
    monkeypatch.setattr(store.RealModelStudy, "reproduce", lambda self, **_: [
        {"run": "A", "same_tokens": False, "difference": 0.5, "ok": True},
        {"run": "B", "difference": 0.5, "ok": False},
    ])
    assert other.main(["--check"], description="d", check="c") == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "the stored fake covers its grid: 3 runs, 6 s when computed"
    assert lines[1:3] == [
        "reproduced: A, largest difference 5.00e-01 nats (other tokens: not compared)",
        "NOT REPRODUCED: B, largest difference 5.00e-01 nats",
    ]
    assert lines[3].startswith("checked in ")
