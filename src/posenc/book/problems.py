"""The lectures' problem sets: build the student's copy and the autograder from one
source notebook, and grade a notebook, with otter-grader.

A problem set is ``src/posenc/book/problem_sets/NAME/NAME.ipynb`` (the instructor's
copy, with solutions and hidden tests: repository data, not a book page and not
installed with the package), in otter assign's notebook format
(v1: raw cells ``# ASSIGNMENT CONFIG``, ``# BEGIN QUESTION`` … ``# END QUESTION``,
solutions marked ``# SOLUTION``, test cells, ``# HIDDEN`` for the hidden ones). Its
answers are values, and its hidden tests check them against posenc's functions.

- :func:`build` runs otter assign on the source: the student's copy (questions and the
  public tests, which it carries in the cell after its install cell, so that it needs
  no other file, as on Colab) goes to ``_build/html/lectures/NAME/`` (the published
  site); the solutions and the autograder zip (every test, hidden ones included) go to
  ``_build/problems/NAME/``, outside it.
- :func:`grade` grades one notebook with the autograder, without Docker or a Jupyter
  server, and returns each question's score and points.

Why otter-grader (7.0.0) and not nbgrader, checked against otter's documentation
(otter-grader.readthedocs.io: "Otter Assign", "Python Notebook Format", "Executing
Submissions: otter run", and ``otter.api``) and its 7.0.0 source: ``otter run`` and
``otter.api.grade_submission`` grade one submission "without containerization" in a
temporary folder (``otter/run/__init__.py``), executing the notebook with nbconvert's
``ExecutePreprocessor`` and a local kernel (``otter/execute/__init__.py``); its tests
are plain Python in OK format, written as cells of the assignment notebook; and
``otter assign`` writes the student's copy and the autograder (tests and zip) from
one source notebook with solutions. nbgrader (its documentation: "Managing the
database", "Command line options") grades into a gradebook database of students and
assignments, in its course-folder layout (source, release, submitted, autograded);
its exchange (release, fetch, submit, collect) and its formgrader are made for a
shared Jupyter server: more machinery than a test of one notebook needs.

Run it with the grader environment's Python (``make grader-env`` builds
``.venv-grader``, whose Python sees the book's .venv after its own packages):

    .venv-grader/bin/python -m posenc.book.problems build rope_problems
    .venv-grader/bin/python -m posenc.book.problems grade NOTEBOOK ... --autograder ZIP

``grade`` prints ``{notebook: {question: [score, points]}}`` as JSON. Paths are
relative to the working folder (the repository's root under make).
"""

from __future__ import annotations

import argparse
import json
import pprint
import shutil
import sys
from pathlib import Path

#: The line of the source's checks cell (after the install cell) that the student's
#: copy fills with the public tests, ``{file name: source}``.
#: Where the problem sets' sources are, relative to the repository root.
SOURCES = Path("src") / "posenc" / "book" / "problem_sets"
PUBLIC_TESTS_LINE = "PUBLIC_TESTS = {}"


def _otter_module(name: str):
    """Import ``otter.NAME`` (``assign``, ``api``), or fail saying where otter is.

    Raises:
        ImportError: otter-grader is not installed in this Python.
    """
    import importlib

    try:
        return importlib.import_module(f"otter.{name}")
    except ImportError as error:
        raise ImportError(
            f"posenc.book.problems needs otter-grader 7.0.0, which this Python "
            f"({sys.executable}) does not have: run it with .venv-grader/bin/python "
            "(`make grader-env` builds it from "
            "src/posenc/book/problem_sets/rope_problems/requirements-grader.txt)"
        ) from error


def source_notebook(name: str, root: Path | str = ".") -> Path:
    """``src/posenc/book/problem_sets/NAME/NAME.ipynb`` under ``root``.

    Raises:
        FileNotFoundError: no such problem set (the message lists those there are).
    """
    path = Path(root) / SOURCES / name / f"{name}.ipynb"
    if not path.exists():
        lectures = Path(root) / SOURCES
        there = sorted(p.stem for p in lectures.glob("*/*.ipynb"))
        raise FileNotFoundError(
            f"no problem set {name!r}: {path} does not exist; the problem sets are "
            f"{there} ({SOURCES}/NAME/NAME.ipynb)"
        )
    return path


def build(
    name: str,
    *,
    root: Path | str = ".",
    html_dir: Path | str | None = None,
    work_dir: Path | str | None = None,
) -> dict[str, Path]:
    """Run otter assign on the problem set ``name`` and publish the student's copy.

    Args:
        name: the problem set, ``SOURCES/NAME/NAME.ipynb`` under ``root``.
        root: the repository's root.
        html_dir: where the student's copy goes; default ``_build/html/lectures/NAME``.
        work_dir: where otter assign writes (solutions, autograder); default
            ``_build/problems/NAME``. Emptied first.

    Returns:
        ``{"student": copy published, "solutions": the solutions notebook, "autograder":
        the autograder zip}``.

    Raises:
        ImportError: otter-grader is not installed in this Python.
        FileNotFoundError: no such problem set. RuntimeError: otter assign wrote no
        student copy or autograder zip, or the student's copy holds a hidden test or
        not one cell to carry the public tests.
    """
    otter_assign = _otter_module("assign").main
    root = Path(root).resolve()
    source = source_notebook(name, root)
    html = Path(html_dir) if html_dir else root / "_build" / "html" / "lectures" / name
    work = Path(work_dir) if work_dir else root / "_build" / "problems" / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    otter_assign(str(source), str(work.resolve()), no_pdfs=True)
    student = work / "student" / f"{name}.ipynb"
    zips = sorted((work / "autograder").glob("*.zip"))
    if not student.exists() or len(zips) != 1:
        raise RuntimeError(
            f"otter assign wrote no student copy ({student}) or not one autograder zip "
            f"({zips}) in {work}"
        )
    html.mkdir(parents=True, exist_ok=True)
    published = html / f"{name}.ipynb"
    published.write_text(_with_public_tests(student, work / "student" / "tests"))
    return {
        "student": published,
        "solutions": work / "autograder" / f"{name}.ipynb",
        "autograder": zips[0],
    }


def _with_public_tests(student: Path, tests: Path) -> str:
    """The student's notebook with the public tests written into its checks cell
    (:data:`PUBLIC_TESTS_LINE`), as JSON text."""
    import nbformat

    public = {p.name: p.read_text() for p in sorted(tests.glob("*.py"))}
    hidden = [n for n, text in public.items() if '"hidden": True' in text]
    if hidden:
        raise RuntimeError(f"the student's tests {hidden} hold a hidden test case")
    nb = nbformat.read(student, as_version=4)
    cells = [c for c in nb.cells if PUBLIC_TESTS_LINE in c.source]
    if len(cells) != 1:
        raise RuntimeError(
            f"{student}: {len(cells)} cells hold the line {PUBLIC_TESTS_LINE!r}; the "
            "checks cell needs it once, to carry the public tests"
        )
    filled = "PUBLIC_TESTS = " + pprint.pformat(public, width=88)
    cells[0].source = cells[0].source.replace(PUBLIC_TESTS_LINE, filled)
    return nbformat.writes(nb)


def grade(notebook: Path | str, autograder: Path | str) -> dict[str, list[float]]:
    """Grade ``notebook`` with the autograder zip: otter executes it on this Python's
    kernel, in a temporary folder, and runs every test, hidden ones included.

    Args:
        notebook: a notebook of the problem set (the student's copy, answered).
        autograder: the zip :func:`build` returns.

    Returns:
        ``{question: [score, points]}``, in question order.

    Raises:
        ImportError: otter-grader is not installed in this Python.
    """
    grade_submission = _otter_module("api").grade_submission
    results = grade_submission(str(notebook), str(autograder), quiet=True)
    return {
        question: [float(results.get_score(question)), float(result.possible)]
        for question, result in results.results.items()
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m posenc.book.problems")
    commands = parser.add_subparsers(dest="command", required=True)
    built = commands.add_parser("build", help="the student's copy and the autograder")
    built.add_argument("name")
    built.add_argument("--html-dir")
    built.add_argument("--work-dir")
    graded = commands.add_parser("grade", help="grade notebooks: JSON scores")
    graded.add_argument("notebooks", nargs="+")
    graded.add_argument("--autograder", required=True)
    args = parser.parse_args(argv)
    if args.command == "build":
        paths = build(args.name, html_dir=args.html_dir, work_dir=args.work_dir)
        print(json.dumps({k: str(v) for k, v in paths.items()}))
    else:
        scores = {nb: grade(nb, args.autograder) for nb in args.notebooks}
        json.dump(scores, sys.stdout)
        print()


if __name__ == "__main__":
    main()
