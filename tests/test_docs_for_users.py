"""The pages speak to users: no words about how this project was made (its working sessions, helpers, its own issue
numbers). A reference that a reader needs is a date and a commit; history lives in the notes beside the results
files under benchmarks/results/, or is gone.

Another project's issue is fine when named with its repository ("flair issues #1729", "yoonkim/lstm-char-cnn issue
#9"): only this project's own numbers are words about how it was made.
"""

from __future__ import annotations

import re

from conftest import REPO

# Pages still being rewritten (none since 2026-12-07): a page listed here is spared until it is cleaned;
# the test is strict for every page not listed, and for all of them while the list is empty.
PAGES_NOT_YET_CLEANED: set[str] = set()

_OTHER_PROJECT = r"(?:\b[\w.-]+/[\w.-]+|\bflair|\bspaCy|\bAllenNLP|\bPyTorch|\btorch|\bbilm-tf|\bthinc|\bh5py)"
MAKING_OF = re.compile(
    r"\bsessions?\s+\d+"  # "session 38", "sessions 8-14"
    r"|\b(?:helper|other|later|earlier|previous|next|this|that|each|every|many|several|lead)(?:'s)?\s+"
    r"(?:helper\s+)?sessions?\b(?!\s*\(`?setsid)"  # "other sessions' tests", "each later session"
    r"|\bhelpers?\b(?!\s+(?:function|module|script)s?\b)"  # "helper sessions' niced tests", "the helpers"
    r"|\bthe lead\b"
    r"|\bissues?\s+#?\d+"  # "issue #26", "issue 25"
    r"|(?<![\w/.-])#\d+\b"  # "#55", "(#67 item 3)"
    r"|\.md#[\w-]*issue-\d+\b|\]\(#[\w-]*issue-\d+\)",  # a link to a heading that carried an issue number
    re.IGNORECASE,
)


OTHER_PROJECTS_ISSUES = re.compile(rf"{_OTHER_PROJECT}(?:'s)?(?:\s+(?:issues?|PRs?|pull requests?))?\s+[#\d, ]*$",
                                   re.IGNORECASE)


def pages() -> list[str]:
    return ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))]


def making_of(text: str) -> list[str]:
    """Each place (line, 1-based) that speaks of how the project was made, with the words found."""
    found = []
    for match in MAKING_OF.finditer(text):
        before = " ".join(text[max(0, match.start() - 80): match.end()].split())  # a reference may wrap a line
        if not OTHER_PROJECTS_ISSUES.search(before):
            found.append(f"{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)!r}")
    return found


def test_the_check_finds_the_making_of_and_spares_other_projects_issues():
    text = ("Run in session 38 beside other sessions' tests.\nhelper sessions' niced tests\n(issue #26's check)\n"
            "See [results](results.md#ner-through-spacy-issue-64) and #55.\n"
            "flair issues #1729, #2520; yoonkim/lstm-char-cnn issue #9; docs/format.md#3-layers; `setsid`, its own "
            "session; allennlp #1169,\n#2092; bilm-tf #176\n")
    assert [hit.split(":")[0] for hit in making_of(text)] == ["1", "1", "2", "3", "4", "4"]


def test_no_page_speaks_of_how_the_project_was_made():
    dirty = {}
    for page in pages():
        hits = making_of((REPO / page).read_text(encoding="utf-8"))
        if hits and page not in PAGES_NOT_YET_CLEANED:
            dirty[page] = hits
    assert dirty == {}

