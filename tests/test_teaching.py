"""The teaching page's words about the RoPE lecture agree with the lecture and its
problem set: its length, its number of sections and the number of questions are read
from book/lectures/rope.md and the problem set's source, not typed twice."""

from __future__ import annotations

import re
from pathlib import Path

from posenc.book import lecture
from test_problems import question_points

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("zero one two three four five six seven eight nine ten eleven twelve").split()


def _teaching() -> str:
    return (ROOT / "book" / "teaching.md").read_text()


def _count(word: str) -> int:
    return WORDS.index(word.lower())


def test_the_teaching_page_leads_with_the_lecture_and_says_its_shape():
    text = _teaching()
    rope = lecture.load("rope")
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings[0] == f"The RoPE lecture — {rope.minutes} minutes"
    sections = re.search(r"(\w+) timed sections add up to (\d+) minutes", text)
    assert _count(sections.group(1)) == len(rope.sections)
    assert int(sections.group(2)) == rope.minutes == sum(s.minutes for s in rope.sections)
    questions = re.search(r"(\w+) questions on the package's own values", text)
    assert _count(questions.group(1)) == len(question_points())
    # the lecture's homework slide and its note give the same count
    said = (ROOT / "book" / "lectures" / "rope.md").read_text()
    counts = re.findall(r"(\w+) questions(?:,| on the package's own values)", said)
    assert len(counts) == 2 and {_count(c) for c in counts} == {len(question_points())}


def test_the_teaching_page_links_the_lecture_its_handout_and_problem_set():
    text = _teaching()
    for href in ("../lectures/rope.html", "../lectures/rope-notes.html",
                 "../lectures/rope.pdf", "../lectures/rope_problems/rope_problems.ipynb"):
        assert f'href="{href}"' in text, href
