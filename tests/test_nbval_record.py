"""tests/nbval_record.py: an nbval run keeps every cell's outputs and time, and still fails on
a cell that raises (the Colab path's one execution of a chapter relies on both)."""

import json
import subprocess
from pathlib import Path

import nbformat
import nbval_record
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook


def _nbval(tmp_path: Path, cells: list) -> tuple[subprocess.CompletedProcess, Path]:
    work = tmp_path / "work"
    work.mkdir()
    # as some of the book's notebooks are stored: a language_info without its lexer
    nbformat.write(new_notebook(cells=cells, metadata={"language_info": {"name": "python"}}),
                   str(work / "tiny.ipynb"))
    record = tmp_path / "record"
    ran = nbval_record.run(work / "tiny.ipynb", record, "--nbval-current-env")
    return ran, record


def test_outputs_and_times_are_recorded(tmp_path):
    ran, record = _nbval(tmp_path, [
        new_code_cell("print('hello')"), new_markdown_cell("# words"),
        new_code_cell("from IPython.display import Markdown\nMarkdown('**bold**')"),
        new_code_cell("x = 1"),
    ])
    assert ran.returncode == 0, ran.stdout
    nb = nbformat.read(str(record / "tiny.ipynb"), as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[0].outputs[0].output_type == "stream" and code[0].outputs[0].text == "hello\n"
    assert code[1].outputs[0].data["text/markdown"] == "**bold**"
    assert code[2].outputs == []
    assert [c.execution_count for c in code] == [1, 2, 3]
    # the kernel's language, as nbclient records it: myst-nb highlights the cells as ipython3
    assert nb.metadata.language_info.pygments_lexer == "ipython3"
    times = json.loads((record / "tiny.cells.json").read_text())
    assert [n for n, _ in times] == [0, 1, 2] and all(t >= 0 for _, t in times)


def test_a_cell_that_raises_fails_the_run_and_is_recorded(tmp_path):
    ran, record = _nbval(tmp_path, [new_code_cell("1 / 0"), new_code_cell("y = 2")])
    assert ran.returncode != 0
    nb = nbformat.read(str(record / "tiny.ipynb"), as_version=4)
    assert nb.cells[0].outputs[-1].output_type == "error"
    assert nb.cells[0].outputs[-1].ename == "ZeroDivisionError"
