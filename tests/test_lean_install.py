"""A lean install: ``pip install posenc`` into a fresh virtual environment that has only
torch and numpy (installed there first, at this environment's versions, with what they
require) installs posenc and nothing else; there the encodings, ``posenc.layers``,
``posenc.tools`` and the position card work, every data file of ``src/posenc`` is
installed, and a module that needs an extra fails with an ImportError that names it
(``posenc._versions.EXTRAS``, kept equal to pyproject.toml's extras here).

The environment is built once per run of this module, in a temporary folder removed
afterwards; one probe script runs in it and the tests read what it found. On the
project's 2-core machine, busy with other work: torch and numpy 28–42 s (torch's local
wheel, about 1 GB of files), posenc 12–26 s (built from a copy of this checkout), the
probe 8–21 s, removing the environment up to a minute; about two minutes in all.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import venv
from pathlib import Path

import numpy
import pytest
import torch

from posenc import _versions
from test_clean_env import package_copy

ROOT = Path(__file__).resolve().parents[1]

#: Llama 3.1 8B's config.json, its positional keys (as released, transformers v4 keys).
LLAMA31 = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}

#: What the probe does inside the lean environment: reads the inputs of ``sys.argv[1]``
#: and writes what it found to ``sys.argv[2]``.
PROBE = r"""
import importlib, importlib.metadata as md, importlib.util, json, re, sys
from pathlib import Path

given = json.loads(Path(sys.argv[1]).read_text())
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
names = lambda dist: [norm(re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0])
                      for r in md.requires(dist) or [] if "extra ==" not in r]
closure, todo = set(), ["torch", "numpy"]
while todo:  # torch, numpy and what they require, recursively, as installed here
    name = todo.pop()
    if name not in closure:
        try:
            todo += names(name)
        except md.PackageNotFoundError:  # a requirement for another platform
            continue
        closure.add(name)
out = {"distributions": sorted(norm(d.metadata["Name"]) for d in md.distributions()),
       "closure": sorted(closure), "torch_requires": names("torch"),
       "installed": {m: importlib.util.find_spec(m) is not None for m in given["modules"]}}
import torch
import posenc
out["imported"] = {}
for name in ("posenc.layers", "posenc.tools", "posenc.card"):
    if importlib.util.find_spec(name) is None:
        out["imported"][name] = "absent"
        continue
    try:
        importlib.import_module(name)
        out["imported"][name] = "ok"
    except ImportError as error:
        out["imported"][name] = f"{type(error).__name__}: {error}"
out["loaded_extras"] = sorted(m for m in given["modules"] if m in sys.modules)
x = torch.tensor(given["x"])
positions = torch.tensor(given["positions"])
out["rope"] = posenc.apply_rope(x, positions, base=given["base"]).tolist()
if out["imported"]["posenc.card"] == "ok":
    card = posenc.position_card(given["config"])
    out["card"] = card.to_dict()
    out["theta_scaled"] = [row.theta_scaled for row in card.group("full").pairs]
out["errors"] = {}
for name, code in given["needs_an_extra"].items():
    try:
        exec(code, {})
        out["errors"][name] = None
    except ImportError as error:
        out["errors"][name] = [type(error).__name__, str(error)]
package = Path(posenc.__file__).parent
out["data"] = sorted(str(p.relative_to(package)) for p in package.rglob("*")
                     if p.is_file() and p.suffix not in (".py", ".pyc"))
Path(sys.argv[2]).write_text(json.dumps(out))
"""

#: Imports that need an extra, and the extra their error must name.
NEEDS_AN_EXTRA = {
    "posenc.book.plotting": ("import posenc.book.plotting", "book"),
    "posenc.layers.train": ("import posenc.layers.train", "study"),
    "posenc.experiments.stats.mean_ci": (
        "from posenc.experiments.stats import mean_ci; mean_ci([1.0, 2.0, 3.0])", "study"),
}


def extra_modules() -> list[str]:
    return sorted({m for names in _versions.EXTRAS.values() for m in names})


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0].lower()


@pytest.fixture(scope="module")
def lean(tmp_path_factory):
    """A virtual environment with torch and numpy (this environment's versions) and
    then ``pip install`` of this checkout without extras; the probe's findings, the
    distributions there before posenc, and the seconds each step took."""
    where = tmp_path_factory.mktemp("lean")
    venv.EnvBuilder(with_pip=False).create(where / "env")
    python = where / "env" / "bin" / "python"
    # this environment's pip, installing into the new one (--python), without compiling
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
           "--no-compile", "--disable-pip-version-check"]
    seconds = {}
    start = time.perf_counter()
    subprocess.run([*pip, f"torch=={torch.__version__.split('+')[0]}",
                    f"numpy=={numpy.__version__}"], check=True)
    seconds["torch and numpy"] = time.perf_counter() - start
    listing = [str(python), "-c", "import importlib.metadata as m, re; print(*sorted(re.sub("
               "r'[-_.]+', '-', d.metadata['Name']).lower() for d in m.distributions()))"]
    before = subprocess.run(listing, check=True, capture_output=True, text=True).stdout.split()
    start = time.perf_counter()
    subprocess.run([*pip, str(package_copy(where / "source"))], check=True)
    seconds["posenc"] = time.perf_counter() - start

    x = torch.randn(2, 2, 5, 8, generator=torch.Generator().manual_seed(0))
    given = {"modules": extra_modules(), "x": x.tolist(), "base": 10000.0,
             "positions": [[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]],  # the second row left-padded
             "config": LLAMA31,
             "needs_an_extra": {name: code for name, (code, _) in NEEDS_AN_EXTRA.items()}}
    (where / "given.json").write_text(json.dumps(given))
    start = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    ran = subprocess.run([str(python), "-c", PROBE, str(where / "given.json"), str(where / "found.json")],
                         cwd=where, capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": "1"})
    seconds["probe"] = time.perf_counter() - start
    assert ran.returncode == 0, ran.stderr[-4000:]
    print("lean install, seconds:", {k: round(v, 1) for k, v in seconds.items()})
    yield {"found": json.loads((where / "found.json").read_text()), "before": before,
           "given": given, "seconds": seconds}
    shutil.rmtree(where / "env")  # torch's files: about 1 GB


def test_the_extras_table_is_pyprojects():
    """posenc._versions.EXTRAS (import name → distribution, used by the messages) lists
    exactly the distributions of each extra in pyproject.toml, and the core is torch and
    numpy alone."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert sorted(requirement_name(r) for r in project["dependencies"]) == ["numpy", "torch"]
    declared = {extra: sorted(requirement_name(r) for r in requirements)
                for extra, requirements in project["optional-dependencies"].items()}
    assert declared == {extra: sorted(names.values()) for extra, names in _versions.EXTRAS.items()}


def test_pip_install_posenc_brings_nothing_but_posenc(lean):
    """Beside torch, numpy and what torch itself requires (sympy among them: torch's own
    Requires-Dist), the install adds posenc alone; none of the book's or the study's
    packages is there."""
    found = lean["found"]
    assert sorted(set(found["distributions"]) - set(lean["before"])) == ["posenc"]
    assert sorted(lean["before"]) == found["closure"], "only torch, numpy and what they require"
    assert "sympy" in found["torch_requires"]
    for module in ("matplotlib", "pandas", "scipy", "tqdm", "platformdirs", "safetensors",
                   "IPython", "sklearn", "transformers"):
        assert found["installed"][module] is False, f"{module} came with pip install posenc"


@pytest.mark.parametrize("module", ["posenc.layers", "posenc.tools", "posenc.card"])
def test_the_core_imports_without_the_extras(lean, module):
    state = lean["found"]["imported"][module]
    if state == "absent":
        pytest.skip(f"{module} does not exist in this checkout yet (being written)")
    assert state == "ok", f"import {module} without the extras: {state}"
    assert set(lean["found"]["loaded_extras"]) <= {"sympy", "filelock"}  # torch's own


def test_apply_rope_in_the_lean_install_matches_transformers(lean):
    """Per-sequence positions of shape (B, T), as transformers' position_ids, with B = H =
    2: the lean install's apply_rope equals Llama's rotary embedding in transformers."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    given = lean["given"]
    x = torch.tensor(given["x"])
    config = LlamaConfig(hidden_size=16, num_attention_heads=2, head_dim=8,
                         rope_parameters={"rope_type": "default", "rope_theta": given["base"]})
    cos, sin = LlamaRotaryEmbedding(config)(x, torch.tensor(given["positions"]))
    expected, _ = apply_rotary_pos_emb(x, x, cos, sin)
    torch.testing.assert_close(torch.tensor(lean["found"]["rope"]), expected)


def test_a_position_card_in_the_lean_install(lean):
    """The card of Llama 3.1's config, made without the extras: the same card as this
    environment's, and its frequencies are transformers' llama3 rule."""
    found = lean["found"]
    if found["imported"]["posenc.card"] == "absent":
        pytest.skip("posenc.card does not exist in this checkout yet (being written)")
    import posenc
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    assert found["card"] == json.loads(posenc.position_card(LLAMA31).to_json())
    inv_freq, _ = ROPE_INIT_FUNCTIONS["llama3"](LlamaConfig(**LLAMA31), "cpu")
    torch.testing.assert_close(torch.tensor(found["theta_scaled"], dtype=torch.float64),
                               inv_freq.double(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("name", NEEDS_AN_EXTRA)
def test_a_module_that_needs_an_extra_says_which(lean, name):
    error = lean["found"]["errors"][name]
    assert error is not None, f"{name} ran without the extras"
    kind, message = error
    extra = NEEDS_AN_EXTRA[name][1]
    assert kind == "ModuleNotFoundError"
    assert f'pip install "posenc[{extra}]"' in message, message
    assert "brings only torch and numpy" in message


def test_every_data_file_is_installed(lean):
    """What src/posenc holds beside its modules (stored results, weights, texts, the
    released configs) is in the installed package: pyproject's package-data misses none.
    One folder stays out on purpose: book/problem_sets holds the instructors' copies of the
    problem sets, solutions and hidden checks, which are not published (issue 41)."""
    package = ROOT / "src" / "posenc"
    private = package / "book" / "problem_sets"
    files = [p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    here = sorted(str(p.relative_to(package)) for p in files
                  if p.suffix not in (".py", ".pyc") and private not in p.parents)
    assert here, "no data files found"
    assert any(private in p.parents for p in files), "the folder left out is gone: drop the rule"
    assert lean["found"]["data"] == here
    assert not any(d.startswith("book/problem_sets") for d in lean["found"]["data"])


def test_a_missing_extra_is_named_only_for_posencs_own_imports(monkeypatch):
    """The finder of posenc._versions: an import from a posenc module of a module that
    an extra has, and that is not installed, names the extra; the same import from
    another module, and a find_spec probe from posenc, are Python's own answers."""
    import importlib.util

    monkeypatch.setitem(_versions.EXTRAS, "study", {**_versions.EXTRAS["study"], "posenc_absent": "absent"})
    with pytest.raises(ModuleNotFoundError, match=re.escape('pip install "posenc[study]"')) as caught:
        exec("import posenc_absent.sub", {"__name__": "posenc.experiments.example"})
    assert caught.value.name == "posenc_absent"
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'posenc_absent'$"):
        exec("import posenc_absent", {"__name__": "some_other_package"})
    probe = {"__name__": "posenc.layers.example", "importlib": importlib}
    exec("found = importlib.util.find_spec('posenc_absent')", probe)
    assert probe["found"] is None
    # the extra that fits the importer comes first
    assert 'pip install "posenc[book]"' in _versions.missing_extra_message("pandas", "posenc.book.x")
    assert 'pip install "posenc[study]"' in _versions.missing_extra_message("pandas", "posenc.layers.x")
    assert _versions.missing_extra_message("numpy", "posenc") is None
