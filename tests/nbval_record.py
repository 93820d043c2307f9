"""A pytest plugin for nbval runs that keeps what they executed: every cell's outputs, as
nbval collected them from the kernel, written back into the notebook, which is saved
when its kernel is done; and every cell's time.

With it a chapter executes once in ``make test`` and serves three checks: nbval's
(every cell runs without an error), the Colab path's (tests/test_clean_env.py runs
nbval on a kernel of the clean environment), and the strict site build's (the saved
notebook goes into the book's execution cache).

Loaded with ``-p nbval_record`` (tests/ on ``PYTHONPATH``); writes to the folder named
by ``POSENC_NBVAL_RECORD``: ``<notebook name>.ipynb`` (cells that did not run keep no
outputs) and ``<notebook name>.cells.json`` (``[[cell number, seconds], ...]``). With
``POSENC_NBVAL_FILL_BOOK_CACHE=1`` (``make page-notebooks``), a notebook of this
checkout whose cells all passed also goes into the book's execution cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

_cells: dict = {}
_failed: dict = {}


def _folder() -> Path:
    return Path(os.environ["POSENC_NBVAL_RECORD"])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when != "call" or not hasattr(item, "test_outputs"):
        return
    report = outcome.get_result()
    notebook = item.parent
    if notebook.nodeid not in _cells and notebook.kernel is not None:
        # the kernel's language_info, over whatever the stored notebook says (some say only
        # {"name": "python"}), as nbclient records it: myst-nb reads it to highlight the
        # cells (ipython3, not python)
        reply = notebook.kernel.kc.kernel_info(reply=True, timeout=60)
        notebook.nb.metadata["language_info"] = reply["content"]["language_info"]
    done = _cells.setdefault(notebook.nodeid, [])
    if item.test_outputs is not None:
        item.cell.outputs = item.test_outputs
        item.cell.execution_count = len(done) + 1
    done.append((item.cell_num, round(report.duration, 2)))
    if report.failed:
        _failed[notebook.nodeid] = True


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After the notebook's last cell: save it with its outputs, and the cells' times."""
    if not hasattr(item, "test_outputs") or (
        nextitem is not None and nextitem.parent is item.parent
    ):
        return
    notebook = item.parent
    name = Path(str(notebook.fspath)).stem
    folder = _folder()
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook.nb, str(folder / f"{name}.ipynb"))
    times = _cells.get(notebook.nodeid, [])
    (folder / f"{name}.cells.json").write_text(json.dumps(times))
    if os.environ.get("POSENC_NBVAL_FILL_BOOK_CACHE") == "1" and not _failed.get(notebook.nodeid):
        # a notebook of this checkout that ran without an error, into the book's cache
        from posenc.book.execute import book_config, store

        store(notebook.nb, Path(str(notebook.fspath)), sum(t for _, t in times),
              book_config()["cache"])


def run(notebook: Path, record: Path, *options: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``notebook`` alone under nbval (``--nbval-lax``: every cell must run without
    an error) with this plugin, from this environment's pytest, recording into
    ``record``; ``options`` choose the kernel (``--nbval-current-env`` or
    ``--nbval-kernel-name NAME``). The run's own pytest configuration is empty, in the
    folder above the notebook's."""
    ini = notebook.parent.parent / "nbval.ini"
    ini.write_text("[pytest]\n")
    env = {**(env or os.environ), "POSENC_NBVAL_RECORD": str(record),
           "PYTHONPATH": str(Path(__file__).resolve().parent)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", str(notebook.parent),
         "-p", "nbval_record", "-p", "no:cacheprovider", "--nbval-lax", *options,
         "-q", "--durations=5", notebook.name],
        cwd=notebook.parent, env=env, capture_output=True, text=True)
