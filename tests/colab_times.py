"""Measure every chapter on the Colab path, one at a time, and print the table.

Runs ``tests/test_clean_env.py`` with one worker (each chapter alone in a fresh
environment, empty cache, its own install cell), then reads the records it wrote to
``_build/colab-path/`` and prints, per chapter: seconds, how many shipped weight files it
read and the training time they replaced, what it installed and what it downloaded.
Exits 1 when a chapter took more than ``test_clean_env.MAX_SECONDS``. A measurement, not
a test: run it on an otherwise idle machine (``make colab-times``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_clean_env import MAX_SECONDS  # noqa: E402


def table(records: list[dict]) -> str:
    lines = ["| chapter | seconds | slowest cell (s) | shipped weights read | training replaced (s) | downloaded |",
             "|---|---:|---|---:|---:|---|"]
    for r in records:
        downloaded = ", ".join(sorted({"/".join(Path(p).parts[:2]) for p in r["downloaded"]})) or "—"
        slowest = r["slowest_cells"][0] if r["slowest_cells"] else {"cell": "—", "seconds": 0}
        lines.append(f"| {r['chapter']} | {r['seconds']:.0f} | cell {slowest['cell']}: {slowest['seconds']:.0f} | "
                     f"{r['shipped_runs_read']} | "
                     f"{r['training_seconds_replaced']:.0f} | {downloaded} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    out = ROOT / "_build" / "colab-path"
    for old in out.glob("*.json"):
        old.unlink()
    pytest = [sys.executable, "-m", "pytest", "tests/test_clean_env.py", "-m", "clean_env", "-q",
              *(argv or [])]
    done = subprocess.run(pytest, cwd=ROOT)
    records = sorted((json.loads(p.read_text()) for p in out.glob("*.json")), key=lambda r: r["chapter"])
    print(table(records))
    packages = sorted({p for r in records for p in r["installed"]})
    print(f"\ninstalled by the chapters' first cells (all chapters): {', '.join(packages)}")
    slow = [r["chapter"] for r in records if r["seconds"] > MAX_SECONDS]
    if slow:
        print(f"over {MAX_SECONDS} s: {', '.join(slow)}")
    return 1 if slow or done.returncode else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
