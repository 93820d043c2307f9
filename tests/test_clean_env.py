"""The Colab path, from a clean environment: each chapter notebook is copied alone into an empty
folder and executed there by a Python in which posenc is not installed, so that only the
notebook's own install cell can make it work.

The clean Python is a fresh virtual environment that shares this project's installed packages
(torch and the rest, to save time) minus every trace of posenc. ``POSENC_INSTALL_SOURCE`` points the
install cell at a wheel built once per test session from a copy of this checkout's package
(pyproject.toml, README.md, src/), so the notebook runs against the working tree; without the
variable the cell installs from the repository's git URL, as on Colab, where pip builds the same
wheel from the same files (built once here instead of in every chapter's cell: about 10 s less a
chapter, and the same build tested). Trained weights come from the shared cache (POSENC_CACHE_DIR).

With ``POSENC_FILL_BOOK_CACHE=1`` (set by ``make clean-env-tests``), a chapter that
passes is also stored, executed as myst-nb executes it, in the book's execution cache of
_config.yml (posenc.execute.store): the strict build of ``make test``, which runs after
this, reads these outputs instead of executing every chapter a third time. Outputs are
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
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from test_notebooks import chapters

pytestmark = pytest.mark.clean_env

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = chapters()


def clean_python(where: Path) -> Path:
    """A virtual environment without pip or posenc that sees this environment's other packages."""
    venv.EnvBuilder(with_pip=False).create(where)
    python = where / "bin" / "python"
    purelib = Path(subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                           text=True).strip())
    shared = where / "shared-site-packages"
    shared.mkdir()
    ours = Path(sysconfig.get_paths()["purelib"])
    for entry in ours.iterdir():
        if "posenc" not in entry.name.lower():
            (shared / entry.name).symlink_to(entry)
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


def run(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([python, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_runs_alone_through_its_install_cell(tmp_path, chapter, posenc_wheel):
    python = clean_python(tmp_path / "env")
    work = tmp_path / "work"
    work.mkdir()
    notebook = work / Path(chapter).name
    shutil.copy2(ROOT / f"{chapter}.ipynb", notebook)
    assert sorted(p.name for p in work.iterdir()) == [notebook.name]

    probe = "import importlib.util, sys; print(importlib.util.find_spec('posenc') is not None, importlib.util.find_spec('torch') is not None)"
    assert run(python, probe, work).stdout.split() == ["False", "True"], "the clean environment must lack posenc only"

    kernels = tmp_path / "kernels"
    (kernels / "posenc-clean").mkdir(parents=True)
    (kernels / "posenc-clean" / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "posenc clean environment",
        "language": "python",
        "env": {"POSENC_INSTALL_SOURCE": str(posenc_wheel), "PYTHONPATH": ""},
    }))
    manager = KernelManager(kernel_name="posenc-clean", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
    nb = nbformat.read(notebook, as_version=4)
    start = time.perf_counter()
    # record_timing off, as myst-nb executes: the outputs may go into the book's cache
    NotebookClient(nb, km=manager, timeout=600, record_timing=False,
                   resources={"metadata": {"path": str(work)}}).execute()
    seconds = time.perf_counter() - start

    where = run(python, "import posenc; print(posenc.__file__)", work)
    assert where.returncode == 0, where.stderr
    installed = Path(where.stdout.strip())
    assert installed.is_relative_to(tmp_path / "env"), f"posenc came from {installed}, not from the install cell"
    assert not installed.is_relative_to(ROOT)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []

    if os.environ.get("POSENC_FILL_BOOK_CACHE") == "1":
        from posenc.execute import book_config, store

        store(nb, ROOT / f"{chapter}.ipynb", seconds, book_config(ROOT)["cache"])
