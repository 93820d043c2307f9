"""The design page (book/design.md) is true to the code: its worked example of adding a
scheme runs, in a fresh Python (so the scheme it registers joins no other test), and the
repository cites no design document outside itself."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "design.md"


def example_blocks(text: str) -> list[str]:
    """The code of every ``{code-block} python`` named ``design-worked-example*``."""
    pattern = re.compile(
        r"```\{code-block\} python\n:name: (design-worked-example[\w-]*)\n(.*?)```", re.S
    )
    return [code for _, code in pattern.findall(text)]


def test_the_worked_example_runs():
    blocks = example_blocks(PAGE.read_text())
    assert len(blocks) == 2, "the page has the scheme and its check"
    code = "\n".join(blocks) + "\nprint('worked example ok')\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "worked example ok" in done.stdout


def test_a_broken_example_fails():
    """The check above can fail: a FlexAttention form that differs from the bias (a
    linear penalty instead of the log) makes the paths disagree."""
    code = "\n".join(example_blocks(PAGE.read_text()))
    broken = code.replace("slopes[h] * torch.log1p((m - n).abs().float())",
                          "slopes[h] * (m - n).abs().float()")
    assert broken != code
    done = subprocess.run([sys.executable, "-c", broken], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert done.returncode != 0


def test_nothing_cites_a_design_file_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    citing = []
    for name in tracked:
        path = ROOT / name
        if path.suffix in {".py", ".md", ".ipynb", ".yml", ".toml", ".txt", ".cfg"} or name == "Makefile":
            text = path.read_text(errors="replace")
            if "DESIGN" + ".md" in text or "../" + "shared" in text:
                citing.append(name)
    assert citing == [], f"these files cite a design document outside the repository: {citing}"
