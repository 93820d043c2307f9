"""The Colab path: each chapter notebook is copied alone into an empty folder and run under
nbval (``--nbval-lax``: every cell must run without an error) on the kernel of a
fresh Python that has only what a Colab runtime already has — torch, numpy, matplotlib, pip, the
notebook kernel and what they need, taken from this project's environment (torch from its local
wheel) — and not posenc, not transformers, not pandas, scipy or safetensors. The notebook's own
first cell must install posenc with the book's extra, ``posenc[book]`` (from this checkout,
through ``POSENC_INSTALL_SOURCE``: a wheel built once per test session, as pip builds it from the
repository's git URL on Colab), with its dependencies from the package index, and whatever else the chapter needs at the book's pinned
versions (:func:`posenc.ensure_installed`). The cache is empty and ``POSENC_REQUIRE_CACHED`` is
unset, as on Colab: every model a chapter loads must come from the weights that ship inside the
package, and the test fails if anything was trained (a ``.pt`` file in the cache). Each
chapter's wall time, its five slowest cells, what it installed and downloaded, and which
shipped weights it read are written to ``_build/colab-path/<chapter>.json``. The time is recorded, not
asserted (a timing inside a test measures the machine's load as much as the chapter):
``python tests/colab_times.py`` runs the chapters one at a time, prints the table and
exits non-zero when one takes more than :data:`MAX_SECONDS`; run it on an idle machine.

This is the one execution of each chapter in ``make test``: nbval's outputs are kept
(tests/nbval_record.py), and with ``POSENC_FILL_BOOK_CACHE=1`` (set by ``make
clean-env-tests``) a chapter that passes is also stored in the book's execution cache of
_config.yml (posenc.book.execute.store): the strict build of ``make test``, which runs after
this, reads these outputs instead of executing every chapter again. Outputs are
stored only for the chapter's current code, never over outputs already there.

Run by ``make clean-env-tests`` (part of ``make test``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

import nbformat
import pytest
from filelock import FileLock

import nbval_record
from test_notebooks import chapters

pytestmark = pytest.mark.clean_env

ROOT = Path(__file__).resolve().parents[1]
#: The chapters with the slowest cells under nbval, slowest first: started first, so that
#: the two workers of ``make clean-env-tests`` finish together rather than one of them
#: running the slowest chapter alone at the end.
SLOW_FIRST = ("book/failures", "book/rope_real_model", "book/streaming", "book/alibi",
              "book/remapping", "book/relative", "book/rope")
CHAPTERS = sorted(chapters(), key=lambda c: SLOW_FIRST.index(c) if c in SLOW_FIRST else len(SLOW_FIRST))


#: What a Colab runtime has before any notebook cell runs, by distribution name: these and
#: everything they require are visible to the clean Python; nothing else is.
COLAB_BASELINE = ("torch", "numpy", "matplotlib", "pip", "ipykernel")
#: The most one chapter may take on the Colab path, in seconds, on an idle 2-core machine
#: (the goal is 120), checked by ``python tests/colab_times.py``, not by this test.
MAX_SECONDS = 180
#: How long nbval waits for the clean kernel to answer: a guard against a kernel that never
#: starts, not a time goal. A fresh environment's first kernel imports IPython without a
#: bytecode cache; on 2 cores shared with a busy process and the other `make test` jobs
#: one took over 180 s to answer (streaming, 2026-11-29), so the guard is 600 s, the same
#: as one cell's.
KERNEL_STARTUP_SECONDS = 600


def _requirement_names(dist) -> set[str]:
    import re

    names = set()
    for requirement in dist.requires or []:
        if "extra ==" in requirement:
            continue
        names.add(re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0].strip().lower())
    return names


def baseline_closure(roots=COLAB_BASELINE) -> set[str]:
    """The distributions of :data:`COLAB_BASELINE` and, recursively, those they require
    (without extras), normalised to lower-case names with '-'."""
    from importlib.metadata import PackageNotFoundError, distribution

    def norm(name):
        return name.lower().replace("_", "-")

    seen, todo = set(), [norm(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        seen.add(name)
        todo += [norm(r) for r in _requirement_names(dist)]
    return seen


def baseline_entries(closure: set[str]) -> set[str]:
    """The top-level entries of this environment's site-packages (packages, modules and
    .dist-info folders) that belong to the distributions in ``closure``."""
    from importlib.metadata import distributions

    entries = set()
    for dist in distributions():
        if dist.metadata["Name"].lower().replace("_", "-") not in closure:
            continue
        for file in dist.files or []:
            top = file.parts[0]
            if top not in ("..", "__pycache__") and not top.endswith(".pth"):
                entries.add(top)
    return entries


def clean_python(where: Path) -> Path:
    """A virtual environment that sees only the Colab baseline of this environment's
    packages (:func:`baseline_entries`), posenc never."""
    venv.EnvBuilder(with_pip=False).create(where)
    python = where / "bin" / "python"
    purelib = Path(subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                           text=True).strip())
    shared = where / "shared-site-packages"
    shared.mkdir()
    ours = Path(sysconfig.get_paths()["purelib"])
    for name in sorted(baseline_entries(baseline_closure())):
        if (ours / name).exists() and "posenc" not in name.lower():
            (shared / name).symlink_to(ours / name)
    # addsitedir, not a bare path: the shared folder's own .pth files are processed too.
    (purelib / "zz_shared.pth").write_text(f"import site; site.addsitedir({str(shared)!r})\n")
    return python


def package_copy(where: Path) -> Path:
    """What pip needs to build posenc from this checkout, copied so parallel builds do not collide."""
    where.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, where / name)
    shutil.copytree(ROOT / "src", where / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return where


@pytest.fixture(scope="session")
def posenc_wheel(tmp_path_factory, request) -> Path:
    """A wheel of this checkout's posenc, built once for the session (and shared by its xdist
    workers)."""
    shared = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):  # an xdist worker: its parent is per session
        shared = shared.parent
    with FileLock(str(shared / "posenc-wheel.lock")):
        wheels = shared / "posenc-wheel"
        if not wheels.exists():
            source = package_copy(shared / "posenc-wheel-source")
            building = shared / "posenc-wheel-building"
            subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                            "--disable-pip-version-check", "-w", str(building), str(source)],
                           check=True)
            building.rename(wheels)
    (wheel,) = wheels.glob("posenc-*.whl")
    return wheel


def nbval(notebook: Path, *, kernels: Path, record: Path) -> subprocess.CompletedProcess:
    """Run ``notebook`` under nbval on the kernel ``posenc-clean`` found under
    ``kernels/kernels/``, recording its outputs and cell times in ``record``
    (:func:`nbval_record.run`)."""
    return nbval_record.run(notebook, record, "--nbval-kernel-name", "posenc-clean",
                            "--nbval-cell-timeout", "600",
                            "--nbval-kernel-startup-timeout", str(KERNEL_STARTUP_SECONDS),
                            env={**os.environ, "JUPYTER_PATH": str(kernels)})


def run(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([python, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)


def installed_packages(python: Path, cwd: Path) -> list[str]:
    """``name==version`` of every distribution the clean Python sees."""
    listing = run(python, "import importlib.metadata as m; print(*sorted({f'{d.metadata[\"Name\"]}=="
                  "{d.version}' for d in m.distributions()}), sep='\\n')", cwd)
    return listing.stdout.split()


def shipped_weights_read(weights: Path, since: float) -> dict:
    """Which shipped weight files the chapter read, from their access times (a record, never
    asserted: a file system mounted noatime reports none), and the training time they
    replaced (the ``seconds`` of their provenance: what the chapter took to train them
    before posenc shipped weights, on the machine that trained them, one thread)."""
    from safetensors import safe_open

    # the install cell writes the files during the run: a file was read when its access
    # time is later than its write time (relatime updates it on the first read after)
    read = sorted(p for p in weights.glob("*.safetensors")
                  if p.stat().st_atime >= since and p.stat().st_atime > p.stat().st_mtime + 0.01)
    seconds = 0.0
    for path in read:
        with safe_open(str(path), "pt") as handle:
            seconds += float(handle.metadata()["seconds"])
    return {"shipped_runs_read": len(read), "training_seconds_replaced": round(seconds, 1)}


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_runs_alone_through_its_install_cell(tmp_path, chapter, posenc_wheel):
    python = clean_python(tmp_path / "env")
    work = tmp_path / "work"
    work.mkdir()
    notebook = work / f"{Path(chapter).name}.ipynb"
    shutil.copy2(ROOT / f"{chapter}.ipynb", notebook)
    assert sorted(p.name for p in work.iterdir()) == [notebook.name]

    probe = ("import importlib.util; print(*(importlib.util.find_spec(m) is not None for m in "
             "('posenc', 'transformers', 'pandas', 'scipy', 'safetensors', 'torch', 'numpy', 'matplotlib')))")
    assert run(python, probe, work).stdout.split() == ["False"] * 5 + ["True"] * 3, \
        "the clean environment has what Colab has: torch, numpy, matplotlib, not posenc and the rest"
    cache = tmp_path / "cache"  # empty, as on a fresh runtime

    kernels = tmp_path / "kernels"
    (kernels / "posenc-clean").mkdir(parents=True)
    (kernels / "posenc-clean" / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "posenc clean environment",
        "language": "python",
        # PIP_COMPILE=0: pip does not byte-compile what the install cell installs (Python
        # compiles what the chapter imports); the rest of pip's work is Colab's
        "env": {"POSENC_INSTALL_SOURCE": str(posenc_wheel), "PYTHONPATH": "", "POSENC_CACHE_DIR": str(cache),
                "POSENC_REQUIRE_CACHED": "", "PIP_COMPILE": "0"},
    }))
    before = installed_packages(python, work)
    started = time.time()
    start = time.perf_counter()
    ran = nbval(notebook, kernels=tmp_path, record=tmp_path / "executed")
    seconds = time.perf_counter() - start
    assert ran.returncode == 0, f"{chapter} failed under nbval on the Colab path:\n{ran.stdout[-6000:]}"
    nb = nbformat.read(tmp_path / "executed" / notebook.name, as_version=4)
    cells = json.loads((tmp_path / "executed" / f"{notebook.stem}.cells.json").read_text())
    assert len(cells) == sum(c.cell_type == "code" for c in nb.cells), "every code cell ran"

    where = run(python, "import posenc; print(posenc.__file__)", work)
    assert where.returncode == 0, where.stderr
    installed = Path(where.stdout.strip())
    assert installed.is_relative_to(tmp_path / "env"), f"posenc came from {installed}, not from the install cell"
    assert not installed.is_relative_to(ROOT)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
    trained = sorted(p.name for p in cache.rglob("*.pt")) if cache.exists() else []
    assert trained == [], f"{chapter} trained models on the Colab path (no shipped weights?): {trained}"
    times = ROOT / "_build" / "colab-path"
    times.mkdir(parents=True, exist_ok=True)
    record = {"chapter": chapter, "seconds": round(seconds, 1),
              "installed": sorted(set(installed_packages(python, work)) - set(before)),
              "downloaded": sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())
              if cache.exists() else [],
              **shipped_weights_read(installed.parent / "weights", started),
              "slowest_cells": [{"cell": n, "seconds": t} for n, t in sorted(cells, key=lambda c: -c[1])[:5]]}
    (times / f"{Path(chapter).name}.json").write_text(json.dumps(record, indent=1))
    print(f"{chapter}: {seconds:.0f} s on the Colab path")

    if os.environ.get("POSENC_FILL_BOOK_CACHE") == "1":
        from posenc.book.execute import book_config, store

        store(nb, ROOT / f"{chapter}.ipynb", seconds, book_config(ROOT)["cache"])
