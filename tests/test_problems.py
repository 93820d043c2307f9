"""The lectures' problem sets (src/posenc/book/problem_sets/NAME/NAME.ipynb, each with its
planted.json), graded by otter-grader against the package (posenc.book.problems): for each set
the solutions get full marks, the student's blank copy none, and a copy with one planted wrong
answer loses exactly that question's points. Every expected score comes from the source notebook's question configs, never a typed
number. The student's copy carries its questions and public tests, not a solution or a hidden
test. The frequencies the RoPE and long-context sets' hidden tests compare against (posenc's)
agree with transformers 5.23 at each set's settings.

The grading runs in the grader environment .venv-grader (``make grader-env``), whose Python sees
the book's .venv after its own packages; without it these tests skip and say so, unless
``POSENC_REQUIRE_GRADER=1``, where they fail. One build and three gradings per set: about 80 s
on 2 busy cores.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
from pathlib import Path

import nbformat
import pytest
import torch
import yaml

from posenc import rope_inv_freq
from posenc.book import problems

ROOT = Path(__file__).resolve().parents[1]
#: Every problem set of the lectures: src/posenc/book/problem_sets/NAME/NAME.ipynb.
NAMES = sorted(p.parent.name for p in (ROOT / problems.SOURCES).glob("*/*.ipynb")
               if p.stem == p.parent.name)
NAME = "rope_problems"
SOURCE = ROOT / problems.SOURCES / NAME / f"{NAME}.ipynb"
GRADER_PYTHON = ROOT / ".venv-grader" / "bin" / "python"
GRADER_REQUIREMENTS = SOURCE.parent / "requirements-grader.txt"


def source(name: str) -> Path:
    return ROOT / problems.SOURCES / name / f"{name}.ipynb"


def planted(name: str) -> tuple[str, str]:
    """The question whose answer the planted copy gets wrong, and the line that plants it,
    from the problem set's ``planted.json`` (``{"question": "q8", "line": "..."}``): an
    answer that passes the question's public check and fails its hidden one (for the RoPE
    set, partial rotary's partner of feature 0 taken half a head away, not half the
    rotated features)."""
    found = json.loads((source(name).parent / "planted.json").read_text())
    return found["question"], found["line"]


def question_points(name: str = NAME) -> dict[str, float]:
    """``{question: points}`` from the source notebook's ``# BEGIN QUESTION`` cells."""
    points = {}
    for cell in nbformat.read(source(name), as_version=4).cells:
        if cell.cell_type == "raw" and cell.source.startswith("# BEGIN QUESTION"):
            config = yaml.safe_load(cell.source)
            points[config["name"]] = float(config.get("points", 1))
    return points


def grader(*args: str) -> str:
    """Run ``python -m posenc.book.problems ARGS`` in the grader environment; its stdout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    ran = subprocess.run([str(GRADER_PYTHON), "-m", "posenc.book.problems", *args], cwd=ROOT,
                         capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": "1"})
    assert ran.returncode == 0, ran.stderr[-4000:]
    return ran.stdout.strip().splitlines()[-1]


def planted_copy(name: str, solutions: Path, where: Path) -> Path:
    """The solutions notebook with the planted line (:func:`planted`) appended to the answer
    cell of its question (the answer cell just before ``grader.check("q…")``)."""
    question, line = planted(name)
    nb = nbformat.read(solutions, as_version=4)
    check = next(i for i, c in enumerate(nb.cells) if c.source.strip() == f'grader.check("{question}")')
    answer = nb.cells[check - 1]
    assert {"otter_answer_cell", "otter_assign_solution_cell"} & set(answer.metadata.get("tags", [])), answer.source
    answer.source += "\n" + line
    where.mkdir()
    nbformat.write(nb, where / f"{name}.ipynb")
    return where / f"{name}.ipynb"


@pytest.fixture(scope="module", params=NAMES)
def graded(request, tmp_path_factory):
    """Each problem set built into a temporary folder, and the scores of the solutions, the
    student's blank copy and the planted copy."""
    name = request.param
    if not GRADER_PYTHON.exists():
        message = f"no grader environment {GRADER_PYTHON.parent.parent}: run `make grader-env`"
        if os.environ.get("POSENC_REQUIRE_GRADER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    where = tmp_path_factory.mktemp(name)
    html, work = where / "html" / "lectures" / name, where / "problems" / name
    paths = {k: Path(v) for k, v in json.loads(grader(
        "build", name, "--html-dir", str(html), "--work-dir", str(work))).items()}
    planted_nb = planted_copy(name, paths["solutions"], where / "planted")
    notebooks = {"solutions": paths["solutions"], "blank": paths["student"], "planted": planted_nb}
    scores = json.loads(grader("grade", *map(str, notebooks.values()),
                               "--autograder", str(paths["autograder"])))
    return {"name": name, "paths": paths, "html": html,
            "scores": {kind: scores[str(path)] for kind, path in notebooks.items()}}


def test_every_lecture_has_its_problem_set():
    """Each lecture of book/lectures (NAME.md) has a problem set NAME_problems with its planted
    wrong answer, and each problem set a lecture."""
    lectures = sorted(p.stem for p in (ROOT / "book" / "lectures").glob("*.md"))
    assert NAMES == sorted(f"{n}_problems" for n in lectures)
    for name in NAMES:
        question, line = planted(name)
        assert question in question_points(name) and line.strip(), name


def test_the_solutions_get_full_marks(graded):
    points = question_points(graded["name"])
    assert len(points) >= 5
    assert graded["scores"]["solutions"] == {q: [p, p] for q, p in points.items()}


def test_the_blank_copy_gets_none(graded):
    assert graded["scores"]["blank"] == {
        q: [0.0, p] for q, p in question_points(graded["name"]).items()}


def test_a_planted_wrong_answer_loses_exactly_its_points(graded):
    question, _ = planted(graded["name"])
    points = question_points(graded["name"])
    expected = {q: [0.0 if q == question else p, p] for q, p in points.items()}
    assert graded["scores"]["planted"] == expected
    total = sum(score for score, _ in graded["scores"]["planted"].values())
    assert total == sum(points.values()) - points[question]


def solution_lines(source: Path) -> list[str]:
    """The lines of the source's answers that otter assign must take out of the student's
    copy: those marked ``# SOLUTION`` (their code) and those between ``# BEGIN SOLUTION``
    and ``# END SOLUTION`` inside a cell."""
    lines = []
    for cell in nbformat.read(source, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        inside = False
        for line in cell.source.splitlines():
            if re.match(r"\s*# BEGIN SOLUTION", line):
                inside = True
            elif re.match(r"\s*# END SOLUTION", line):
                inside = False
            elif inside or re.search(r"# SOLUTION( NO PROMPT)?$", line):
                code = re.sub(r"\s*# SOLUTION( NO PROMPT)?$", "", line).strip()
                lines.append(code.split("=", 1)[1].strip() if "=" in code else code)
    return [line for line in lines if line]


def test_the_published_copy_holds_questions_and_public_tests_only(graded):
    """The student's copy is the only file published; it has every question's check, the
    public tests in the cell after its install cell and neither an answer nor a hidden test;
    the solutions and the autograder stay outside the published folder."""
    html, paths, name = graded["html"], graded["paths"], graded["name"]
    assert sorted(p.name for p in html.rglob("*")) == [f"{name}.ipynb"]
    for kind in ("solutions", "autograder"):
        assert html.parent.parent not in paths[kind].parents, kind
    student = nbformat.read(paths["student"], as_version=4)
    text = "\n".join(cell.source for cell in student.cells)
    assert json.dumps(student.metadata).find("hidden") == -1
    for line in solution_lines(source(name)):
        assert line not in text, f"the student's copy holds the answer {line!r}"
    codes = [c.source for c in student.cells if c.cell_type == "code"]
    assert "PUBLIC_TESTS = {" in codes[1]
    (public,) = [ast.literal_eval(node.value) for node in ast.parse(codes[1]).body
                 if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "PUBLIC_TESTS"]
    assert sorted(public) == sorted(f"{q}.py" for q in question_points(name))
    for name, test in public.items():
        assert "'hidden': False" in test and "'hidden': True" not in test, name
        assert f'grader.check("{name[:-3]}")' in text


@pytest.mark.parametrize("name", NAMES)
def test_the_install_cell_installs_what_the_problems_need(name):
    """The first code cell installs posenc[book] from the repository of _config.yml, as the
    chapters do, and otter-grader at the grader environment's version."""
    first = next(c for c in nbformat.read(source(name), as_version=4).cells
                 if c.cell_type == "code").source
    repository = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    assert f"git+{repository}.git" in first and "posenc[book] @ {source}" in first
    pin = re.search(r"^otter-grader==(\S+)$", GRADER_REQUIREMENTS.read_text(), re.M).group(1)
    assert f'"otter-grader=={pin}"' in first


def test_without_otter_or_the_problem_set_the_errors_say_what_to_do(monkeypatch):
    """In a Python without otter-grader (the book's .venv) the builder names the grader
    environment; an unknown problem set is refused with those there are."""
    import sys


    monkeypatch.setitem(sys.modules, "otter", None)
    with pytest.raises(ImportError, match=r"otter-grader 7\.0\.0.*\.venv-grader/bin/python.*make grader-env"):
        problems.grade(SOURCE, SOURCE)
    with pytest.raises(FileNotFoundError, match=rf"no problem set 'rope'.*'{NAME}'"):
        problems.source_notebook("rope", ROOT)


def settings(name: str = NAME) -> dict[str, float]:
    """A problem set's settings (head_dim, rope_theta, original_max_position_embeddings), read
    from its settings cell."""
    cell = next(c.source for c in nbformat.read(source(name), as_version=4).cells
                if c.cell_type == "code" and c.source.startswith("head_dim ="))
    found = {}
    for node in ast.parse(cell).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue  # a computed line (the long-context set's inv_freq)
    return found


@pytest.mark.parametrize("name, rope_type, parameters, lengths", [
    ("rope_problems", "default", {}, None),
    ("long_context_problems", "default", {}, None),
    ("long_context_problems", "dynamic", {"factor": 2.0}, 3),
    ("long_context_problems", "yarn", {"factor": 4.0}, None),
    ("long_context_problems", "llama3", {"factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0}, None),
], ids=["rope-default", "long-default", "long-dynamic", "long-yarn", "long-llama3"])
def test_the_hidden_tests_reference_agrees_with_transformers(name, rope_type, parameters, lengths):
    """posenc's frequencies and attention factor, which the hidden tests hold the answers to,
    against transformers 5.23's at each set's head_dim, rope_theta and L: the RoPE set's
    frequencies (its questions 1, 2 and 5), and the long-context set's rules at the factors of
    its questions 2 to 4 (dynamic NTK at the length 3L of question 2)."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    s = settings(name)
    head_dim, base, length = s["head_dim"], s["rope_theta"], s["original_max_position_embeddings"]
    if rope_type in ("yarn", "dynamic", "llama3"):
        parameters = {**parameters, "original_max_position_embeddings": length}
    seq_len = None if lengths is None else lengths * length
    scaling = None if rope_type == "default" else {"rope_type": rope_type, **parameters}
    ours, ours_factor = rope_inv_freq(head_dim, base, scaling, seq_len=seq_len)
    config = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                         max_position_embeddings=length,
                         rope_parameters={"rope_type": rope_type, "rope_theta": base, **parameters})
    if rope_type == "default":
        theirs, theirs_factor = LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        theirs, theirs_factor = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)
    torch.testing.assert_close(ours, theirs.float(), rtol=2e-6, atol=0)
    assert ours_factor == pytest.approx(float(theirs_factor), rel=1e-12)
