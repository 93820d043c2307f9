"""The Colab path, from a clean environment: each chapter notebook is copied alone into an empty
folder and executed there by a Python in which posenc is not installed, so that only the
notebook's own install cell can make it work.

The clean Python is a fresh virtual environment that shares this project's installed packages
(torch and the rest, to save time) minus every trace of posenc. ``POSENC_INSTALL_SOURCE`` points the
install cell at a copy of this checkout's package (pyproject.toml, README.md, src/), so the
notebook runs against the working tree; without the variable the cell installs from the
repository's git URL, as on Colab. Trained weights come from the shared cache (POSENC_CACHE_DIR).

Run by ``make clean-env-tests`` (part of ``make test``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import nbformat
import pytest
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


def run(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([python, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_runs_alone_through_its_install_cell(tmp_path, chapter):
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
        "env": {"POSENC_INSTALL_SOURCE": str(package_copy(tmp_path / "posenc-source")), "PYTHONPATH": ""},
    }))
    manager = KernelManager(kernel_name="posenc-clean", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
    nb = nbformat.read(notebook, as_version=4)
    NotebookClient(nb, km=manager, timeout=600, resources={"metadata": {"path": str(work)}}).execute()

    where = run(python, "import posenc; print(posenc.__file__)", work)
    assert where.returncode == 0, where.stderr
    installed = Path(where.stdout.strip())
    assert installed.is_relative_to(tmp_path / "env"), f"posenc came from {installed}, not from the install cell"
    assert not installed.is_relative_to(ROOT)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
