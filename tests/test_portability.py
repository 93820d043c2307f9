"""What a reader's machine needs beyond this one: a Mac (MPS has no float64, macOS has no
``os.sched_getaffinity``), a GPU (timings wait for the device), and an honest version floor
(an older torch fails at import with what to install)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posenc import _versions, utils

ROOT = Path(__file__).resolve().parents[1]


def test_usable_cpus_without_sched_getaffinity(monkeypatch):
    assert utils.usable_cpus() >= 1
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # macOS, Windows
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert utils.usable_cpus() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert utils.usable_cpus() == 1


def test_synchronize_waits_for_each_kind_of_device(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(("cuda", device)))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append(("mps",)))
    utils.synchronize("cpu")
    assert calls == []
    utils.synchronize("cuda:0")
    utils.synchronize(torch.device("mps"))
    assert calls == [("cuda", torch.device("cuda:0")), ("mps",)]


def test_cpu_float64_moves_before_converting():
    x = torch.randn(3, requires_grad=True, dtype=torch.float32)
    y = utils.cpu_float64(x)
    assert y.dtype == torch.float64 and y.device.type == "cpu" and not y.requires_grad
    assert torch.equal(y, x.detach().double())


# A tensor on MPS cannot become float64 there: convert on the CPU. The pattern that breaks
# a Mac is `.double()` (or `.to(torch.float64)`) applied before `.cpu()`; in the package every
# conversion to float64 goes through the CPU first.
DOUBLE_BEFORE_CPU = re.compile(r"\.(double\(\)|to\(torch\.float64\))[^\n#]*\.cpu\(\)")


def doubles_not_after_cpu(text: str) -> list[int]:
    """Line numbers of every ``.double()`` not directly preceded (across line breaks) by
    ``.cpu()``."""
    found = []
    for match in re.finditer(r"\.double\(\)", text):
        before = re.sub(r"\s+", "", text[: match.start()])
        line = text.count("\n", 0, match.start()) + 1
        if not before.endswith(".cpu()") and "compute_inv_freq" not in text.splitlines()[line - 1]:
            found.append(line)  # (a table from compute_inv_freq is made on the CPU)
    return found


def _package_sources():
    return sorted((ROOT / "src" / "posenc").rglob("*.py"))


def _notebook_code():
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                yield path.name, "".join(cell["source"])


def test_no_float64_before_moving_to_the_cpu():
    found = [(p.name, m.group(0)) for p in _package_sources() for m in DOUBLE_BEFORE_CPU.finditer(p.read_text())]
    found += [(name, m.group(0)) for name, code in _notebook_code() for m in DOUBLE_BEFORE_CPU.finditer(code)]
    assert found == [], f"float64 before .cpu() (fails on MPS; use posenc.utils.cpu_float64): {found}"
    # the check can fail
    assert DOUBLE_BEFORE_CPU.search("loss.mean(dim=1).double().cpu()")


def test_the_package_makes_float64_on_the_cpu_only():
    allowed = {"utils.py"}  # cpu_float64 itself
    found = [(p.name, n) for p in _package_sources() if p.name not in allowed for n in doubles_not_after_cpu(p.read_text())]
    assert found == [], f".double() without .cpu() first (use posenc.utils.cpu_float64): {found}"
    assert doubles_not_after_cpu("x.cpu()\n    .double()") == [] and doubles_not_after_cpu("x.double()") == [1]


def test_too_old_versions_say_what_to_install():
    message = _versions.too_old("torch", "2.4.1+cu121", "2.7")
    assert "torch >= 2.7" in message and "torch 2.4.1+cu121" in message and 'pip install --upgrade "torch>=2.7"' in message
    assert _versions.too_old("torch", "2.13.0+cpu", "2.7") is None
    assert _versions.too_old("numpy", "2.4.6", "1.24") is None
    assert _versions.parse("2.7.0a0+git123") == (2, 7, 0)
    with pytest.raises(ImportError, match="numpy >= 1.24"):
        _versions.check({"torch": "2.13.0", "numpy": "1.21.0"})
    _versions.check({"torch": "2.7.0", "numpy": "1.24.0"})


def test_importing_posenc_with_a_too_old_torch_fails_at_once():
    code = "import torch; torch.__version__ = '2.4.0'; import posenc"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: posenc needs torch >= 2.7, but this Python has torch 2.4.0")


def test_the_declared_floor_is_the_checked_one():
    text = (ROOT / "pyproject.toml").read_text()
    for package, needed in _versions.MINIMUM.items():
        assert f'"{package}>={needed}"' in text
    assert f'"transformers>={_versions.MINIMUM_OPTIONAL["transformers"]}"' in text


def test_a_cuda_machine_verifies_the_stored_cpu_study(monkeypatch):
    """`make book` on a CUDA machine: the study the book reads is the cpu preset's."""
    from posenc.experiments import study

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert study.main(["--verify"]) == 0


def test_the_large_scale_is_an_explicit_opt_in(monkeypatch):
    from posenc import experiments

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv(experiments.SCALE_ENV, raising=False)
    assert experiments.book_scale() == "small"  # a GPU does not switch it on
    monkeypatch.setenv(experiments.SCALE_ENV, "large")
    assert experiments.book_scale() == "large"
    monkeypatch.setenv(experiments.SCALE_ENV, "huge")
    with pytest.raises(ValueError, match="POSENC_SCALE='huge'"):
        experiments.book_scale()


def test_a_chapter_says_what_it_will_train(monkeypatch, tmp_path):
    """Small scale: every model ships, nothing trains. Large scale with an empty cache:
    the sentence counts the missing runs and gives their length."""
    from posenc import experiments

    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    assert "nothing will be trained" in experiments.training_plan("small")
    large = experiments.training_plan("large")
    runs = len(experiments.book_runs("large"))
    assert f"{runs} of the book's {runs} models" in large
    steps = experiments.SCALES["large"]["train"]["steps"]
    assert f"{steps} steps" in large
    with pytest.raises(ValueError, match="'huge'"):
        experiments.training_plan("huge")


def test_scoring_bounds_the_tokens_per_forward_pass(monkeypatch):
    from posenc.layers.model import ModelConfig, TinyLM
    from posenc.layers.train import token_losses

    model = TinyLM(ModelConfig(scheme="rope", d_model=16, num_heads=2, num_layers=1)).eval()
    seen = []
    original = model.forward
    monkeypatch.setattr(model, "forward", lambda x, *a, **k: (seen.append(tuple(x.shape)), original(x, *a, **k))[1])
    data = torch.randint(0, 256, (20_000,), dtype=torch.uint8)
    small = token_losses(model, data, 64, max_tokens=4096, batch_tokens=8192)
    assert max(b for b, _ in seen) == 16  # short windows: 16 at a time, as before
    seen.clear()
    bounded = token_losses(model, data, 2048, max_tokens=16384, batch_tokens=8192)
    assert max(b * t for b, t in seen) <= 8192 and bounded.shape == (8, 2048)
    assert small.shape == (64, 64)


def test_the_book_pins_are_requirements_txt(monkeypatch):
    pins = dict(line.split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for name, version in _versions.BOOK_PINS.items():
        assert pins[name] == version
    # installs only what is missing or at another version, by version
    calls = []
    monkeypatch.setattr("subprocess.check_call", lambda cmd: calls.append(cmd))
    monkeypatch.setattr(_versions, "installed_version",
                        lambda d: {"transformers": _versions.BOOK_PINS["transformers"], "gguf": "0.10.0"}.get(d))
    assert _versions.ensure_installed("transformers", "gguf", "accelerate") == [
        f"gguf=={_versions.BOOK_PINS['gguf']}", f"accelerate=={_versions.BOOK_PINS['accelerate']}"]
    assert calls[0][1:4] == ["-m", "pip", "install"]
    with pytest.raises(ValueError, match="no pinned version"):
        _versions.ensure_installed("numpy")
