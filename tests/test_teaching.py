"""The teaching page's words about each lecture of the course agree with the lecture and its
problem set: its length, its number of sections and the number of questions are read from
book/lectures/NAME.md and the problem set's source, not typed twice; the lecture's own
homework slide and notes give the same count of questions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from posenc.book import lecture
from test_problems import question_points

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("zero one two three four five six seven eight nine ten eleven twelve").split()
LECTURES = sorted(p.stem for p in (ROOT / "book" / "lectures").glob("*.md"))


def _teaching() -> str:
    return (ROOT / "book" / "teaching.md").read_text()


def _count(word: str) -> int:
    return WORDS.index(word.lower())


def _block(name: str) -> str:
    """The teaching page's subsection of lecture ``name``: from its heading to the next."""
    title = lecture.load(name).title
    found = re.search(rf"^### Lecture \d+: {re.escape(title)} — \d+ minutes\n(.*?)(?=^##)",
                      _teaching(), flags=re.M | re.S)
    assert found, f"no subsection for the lecture {title!r}"
    return found.group(0)


def test_the_teaching_page_leads_with_the_course():
    headings = re.findall(r"^## (.+)$", _teaching(), flags=re.M)
    assert headings[0] == "The course: four lectures" and len(LECTURES) == 4


@pytest.mark.parametrize("name", LECTURES)
def test_each_lectures_subsection_says_its_shape(name):
    text, source = _block(name), lecture.load(name)
    heading = re.search(r"— (\d+) minutes", text)
    assert int(heading.group(1)) == source.minutes == sum(s.minutes for s in source.sections)
    sections = re.search(r"in (\w+)\s+timed\s+sections", text)
    assert _count(sections.group(1)) == len(source.sections)
    questions = re.search(r"\*\*Problem set\.\*\* (\w+) questions", text)
    assert _count(questions.group(1)) == len(question_points(f"{name}_problems"))


@pytest.mark.parametrize("name", LECTURES)
def test_the_lectures_homework_slide_and_notes_give_the_count(name):
    said = (ROOT / "book" / "lectures" / f"{name}.md").read_text()
    last = said[said.rindex("\n## "):]  # the homework slide, its words and its notes
    counts = re.findall(r"\b(\w+) questions\b", last)
    assert counts and {_count(c) for c in counts} == {len(question_points(f"{name}_problems"))}


@pytest.mark.parametrize("name", LECTURES)
def test_the_teaching_page_links_the_lecture_its_handout_and_problem_set(name):
    text = _block(name)
    for href in (f"../lectures/{name}.html", f"../lectures/{name}-notes.html",
                 f"../lectures/{name}.pdf",
                 f"../lectures/{name}_problems/{name}_problems.ipynb"):
        assert f'href="{href}"' in text, href
