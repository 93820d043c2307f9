import pytest
import torch

import json
import platform
from pathlib import Path

from posenc.layers import data
from posenc.layers.data import (
    eval_windows,
    get_batch,
    load_stdlib_corpus,
    load_text_corpus,
    stdlib_source_files,
    stdlib_sources,
)


@pytest.fixture(scope="module")
def corpus():
    return load_stdlib_corpus()


def test_stdlib_corpus_is_real_deterministic_and_split_by_file(corpus):
    files = stdlib_sources()
    assert len(files) >= 20 and files == sorted(files)
    assert set(corpus.train_files).isdisjoint(corpus.val_files)
    assert len(corpus.train_files) + len(corpus.val_files) == len(files)
    assert corpus.train.dtype == torch.uint8 and corpus.train.numel() > 1_000_000
    assert b"def " in bytes(corpus.val[:20000].tolist())
    again = load_stdlib_corpus()
    assert torch.equal(again.train, corpus.train) and again.fingerprint == corpus.fingerprint


def test_batches_are_shifted_windows(corpus):
    g = torch.Generator().manual_seed(0)
    x, y = get_batch(corpus.train, 4, 33, generator=g)
    assert x.shape == y.shape == (4, 33) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    x2, _ = get_batch(corpus.train, 4, 33, generator=torch.Generator().manual_seed(0))
    assert torch.equal(x, x2)


def test_eval_windows_cover_the_same_text_at_every_length(corpus):
    x64, y64 = eval_windows(corpus.val, 64, 1024)
    x256, _ = eval_windows(corpus.val, 256, 1024)
    assert x64.shape == (16, 64) and x256.shape == (4, 256)
    assert torch.equal(x64.flatten(), x256.flatten())
    assert torch.equal(x64.flatten()[1:], y64.flatten()[:-1])


def test_text_file_and_folder(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("hello world " * 100)
    single = load_text_corpus(f)
    assert single.train.numel() + single.val.numel() == 1200
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(12):
        (folder / f"{i:02d}.txt").write_text(f"file {i}\n")
    split = load_text_corpus(folder)
    assert split.val_files == ("09.txt",) and len(split.train_files) == 11


@pytest.mark.parametrize(
    "call, error, text",
    [
        (lambda c: get_batch(c.train[:10], 2, 10), ValueError, "seq_len must be < the stream length 10, got 10"),
        (lambda c: get_batch(c.train, 0, 10), ValueError, "batch_size must be >= 1"),
        (lambda c: eval_windows(c.val, 512, 100), ValueError, "no evaluation window of length 512 fits"),
        (lambda c: load_text_corpus("/nonexistent/file.txt"), FileNotFoundError, "no such file"),
    ],
)
def test_bad_input(corpus, call, error, text):
    with pytest.raises(error, match=text):
        call(corpus)


def test_folder_with_too_few_files(tmp_path):
    (tmp_path / "one.txt").write_text("x")
    with pytest.raises(ValueError, match="need at least 10 files"):
        load_text_corpus(tmp_path)


def test_recursive_corpus_keeps_file_boundaries_and_leaves_out_test_suites():
    files = stdlib_sources(recursive=True)
    assert len(files) > len(stdlib_sources()) and files == sorted(files)
    assert not any({"test", "tests", "idle_test", "site-packages"} & set(name.split("/")) for name, _ in files)
    big = load_stdlib_corpus(recursive=True)
    assert big.val.numel() > 1_000_000 and len(big.val_files) > 50
    docs = big.val_documents()
    assert len(docs) == len(big.val_files) and sum(d.numel() for d in docs) == big.val.numel()
    first = [content for _, content in files if content][9]  # the 10th file is validation
    assert bytes(docs[0].tolist()) == first
    # the top-level corpus is unchanged by the new option (its cache keys stay valid)
    assert load_stdlib_corpus().fingerprint == load_stdlib_corpus(recursive=False).fingerprint


def test_the_snapshot_is_cpython_3_11_7s_library_with_its_licence():
    provenance = data.snapshot_provenance()
    assert provenance["python"] == data.SNAPSHOT_PYTHON == "3.11.7"
    files = stdlib_sources(recursive=True)
    assert provenance["files"] == len(files) and provenance["bytes"] == sum(len(c) for _, c in files)
    assert b"PYTHON SOFTWARE FOUNDATION LICENSE" in data._snapshot()["LICENSE.txt"]
    assert data.SNAPSHOT.stat().st_size < 3 * 2**20  # compressed: about 2 MB


@pytest.mark.skipif(platform.python_version() != data.SNAPSHOT_PYTHON,
                    reason="the running Python's library differs from the snapshot's 3.11.7")
def test_the_snapshot_holds_exactly_this_pythons_bytes():
    for recursive in (False, True):
        assert stdlib_sources(recursive=recursive) == stdlib_sources(recursive=recursive, source="running")
    assert data.stdlib_file("pydoc_data/topics.py") == data.stdlib_file("pydoc_data/topics.py", source="running")


def test_the_snapshot_is_the_corpus_of_the_stored_results():
    """Every stored study result was made with the snapshot's bytes: the corpus fingerprint in
    its record is the snapshot corpus's, so that no cache key or stored result changes."""
    study = load_stdlib_corpus(recursive=True)
    results = Path(data.__file__).parents[1] / "results" / "length_generalization"
    corpora = {tuple(json.loads(p.read_text())["corpus"]) for p in results.glob("*.json")}
    assert corpora == {(study.name, study.fingerprint)}
    assert (load_stdlib_corpus().name, load_stdlib_corpus().fingerprint) == ("python-stdlib", "092ca30bf93ac40e")


def test_sources_are_checked():
    with pytest.raises(ValueError, match="source must be one of"):
        stdlib_sources(source="pypi")
    with pytest.raises(FileNotFoundError, match="not in the snapshot"):
        data.stdlib_file("no/such.py")
