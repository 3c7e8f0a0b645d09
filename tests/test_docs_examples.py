"""Every Python and shell example of README.md and docs/, run as written (#67 item 3).

A fenced block in python, bash, sh, shell or console is an example. It runs in a fresh process, in a scratch
copy of the checkout's layout (examples/, scripts/, benchmarks/, src/, tests/, docs/ linked in; `../shared`
beside it when there is one; corpus.txt, sentences.txt, in.txt, docs.txt and heldout.txt holding
examples/sentences.txt, for the examples that read "your" file), with the network closed to it (ELMO_OFFLINE=1, HF_HUB_OFFLINE=1) and
one thread. It passes when it exits 0. An example that cannot run here says so on the line above its fence
(docs/examples.md), in an HTML comment that neither GitHub nor the site shows:

    <!-- example: skip needs the network (downloads the 374 MB `original` model) -->
    <!-- example: slow -->                     (runs, but only where slow tests run: CI, not `-m "not slow"`)
    <!-- example: tested-by tests/test_x.py --> (run, with its output checked, by that test)

An example that repeats an earlier one word for word runs once. One that is still running after 3 minutes (10 if
slow) is ended, with everything it started, and fails.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, SHARED, subprocess_env

LANGUAGES = {"python": "python", "py": "python", "bash": "shell", "sh": "shell", "shell": "shell", "console": "shell"}
MARKER = re.compile(r"^\s*<!--\s*example:\s*(?P<kind>[\w-]+)\s*(?P<reason>.*?)\s*-->\s*$")
KINDS = ("skip", "slow", "tested-by")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
LINKED = ("examples", "scripts", "benchmarks", "src", "tests", "docs", "pyproject.toml")
SAMPLE_INPUTS = ("corpus.txt", "sentences.txt", "in.txt", "docs.txt", "heldout.txt")
LIMIT_S, SLOW_LIMIT_S = 180, 600  # an example still running then is a server or hours of work: it needs a marker


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


@dataclass(frozen=True)
class Example:
    page: str  # relative to the checkout
    line: int  # of the opening fence, 1-based
    language: str  # "python" or "shell"
    code: str
    kind: str | None = None  # the marker's: skip, slow, tested-by
    reason: str = ""

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def marker_above(lines: list[str], fence_index: int) -> tuple[str | None, str]:
    """The `<!-- example: ... -->` on the nearest non-blank line above a fence, if any."""
    i = fence_index - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    found = MARKER.match(lines[i]) if i >= 0 else None
    return (found["kind"], found["reason"]) if found else (None, "")


def examples_in(text: str, page: str) -> list[Example]:
    """The runnable fenced blocks of one markdown text, with their markers; indented fences (in lists) dedented."""
    lines, found, i = text.split("\n"), [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, start = len(opening["indent"]), opening["fence"], i
        body, i = [], i + 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
            i += 1
        i += 1
        language = LANGUAGES.get(opening["lang"].lower())
        if language:
            kind, reason = marker_above(lines, start)
            code = "\n".join(body) + "\n"
            if opening["lang"].lower() == "console":  # `$ command` lines are the commands; the rest is output
                prompts = [line[2:] for line in body if line.startswith("$ ")]
                code = "\n".join(prompts) + "\n" if prompts else code
            found.append(Example(page, start + 1, language, code, kind, reason))
    return found


def all_examples() -> list[Example]:
    """Every page's examples; an example whose code repeats an earlier one (the README's Python API tour on the
    Python API page) runs once, where it first appears."""
    found, first = [], {}
    for path in pages():
        for e in examples_in(path.read_text(encoding="utf-8"), str(path.relative_to(REPO))):
            if e.kind is None and e.code in first:
                e = Example(e.page, e.line, e.language, e.code, "same-as", first[e.code])
            first.setdefault(e.code, e.name)
            found.append(e)
    return found


def as_param(example: Example):
    marks = []
    if example.kind == "skip":
        marks.append(pytest.mark.skip(reason=f"{example.name}: {example.reason}"))
    elif example.kind == "tested-by":
        marks.append(pytest.mark.skip(reason=f"{example.name}: run by {example.reason}"))
    elif example.kind == "same-as":
        marks.append(pytest.mark.skip(reason=f"{example.name}: the same code as {example.reason}, run there"))
    elif example.kind == "slow":
        marks.append(pytest.mark.slow)
    return pytest.param(example, id=example.name, marks=marks)


EXAMPLES = all_examples()


def test_the_collector_reads_fences_markers_and_prompts():
    text = ("# t\n\n<!-- example: skip needs a GPU -->\n```bash\nelmo embed a b --device cuda\n```\n\n"
            "```python\nprint(1)\n```\n\n- item\n\n    ```console\n    $ elmo models\n    small ...\n    ```\n\n"
            "```text\nnot code\n```\n\n<!-- example: slow -->\n\n~~~sh\nsleep 0\n~~~\n")
    found = examples_in(text, "p.md")
    assert [(e.line, e.language, e.kind, e.reason) for e in found] == [
        (4, "shell", "skip", "needs a GPU"), (8, "python", None, ""), (14, "shell", None, ""),
        (25, "shell", "slow", "")]
    assert found[0].code == "elmo embed a b --device cuda\n" and found[2].code == "elmo models\n"


def test_every_marker_is_known_and_says_why():
    """A misspelt marker would silently run (or not skip) an example; a skip without a reason hides why."""
    bad = [f"{e.name}: {e.kind} {e.reason!r}" for e in EXAMPLES
           if e.kind not in (None, "same-as") and (e.kind not in KINDS or (e.kind != "slow" and not e.reason))]
    assert bad == [], f"markers are `<!-- example: {' | '.join(KINDS)} REASON -->`"
    named = [e for e in EXAMPLES if e.kind == "tested-by"]
    assert all((REPO / e.reason.split()[0]).is_file() for e in named), [e.reason for e in named]


def test_the_readme_and_docs_have_examples_that_run():
    assert len(EXAMPLES) > 50 and sum(e.kind in (None, "slow") for e in EXAMPLES) >= 6


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A scratch checkout: the repository's folders linked in, outputs land here; `../shared` beside it."""
    root = tmp_path / "checkout"
    root.mkdir()
    for name in LINKED:
        (root / name).symlink_to(REPO / name)
    if SHARED.is_dir():
        (tmp_path / "shared").symlink_to(SHARED)
    for name in SAMPLE_INPUTS:
        shutil.copy(REPO / "examples" / "sentences.txt", root / name)
    return root


def example_env(root: Path) -> dict:
    env = subprocess_env()
    env.update(ELMO_OFFLINE="1", HF_HUB_OFFLINE="1", ELMO_CACHE=str(root / ".elmo-cache"), MPLBACKEND="Agg",
               PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""))  # `elmo`, `python`: this venv
    return env


@pytest.mark.parametrize("example", [as_param(e) for e in EXAMPLES])
def test_example(example: Example, checkout: Path):
    if "../shared" in example.code and not SHARED.is_dir():
        pytest.skip("needs ../shared (the project's fixtures and data beside the checkout; "
                    "python scripts/get_test_data.py fetches them)")
    limit = SLOW_LIMIT_S if example.kind == "slow" else LIMIT_S
    returncode, out, err = run_example(example, checkout, limit)
    assert returncode == 0, f"{example.name} exited {returncode}:\n{out[-1500:]}\n{err[-3000:]}"


def run_example(example: Example, root: Path, limit: float) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the example run in `root`; past `limit` seconds it is ended, with all it
    started (its own session), and the test fails saying how to mark it."""
    command = [sys.executable, "-c", example.code] if example.language == "python" else \
        ["bash", "-e", "-o", "pipefail", "-c", example.code]
    with subprocess.Popen(command, cwd=root, env=example_env(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, text=True, start_new_session=True) as run:
        try:
            out, err = run.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate()
            pytest.fail(f"{example.name} still ran after {limit} s (a server, or hours of work?): mark it "
                        "`<!-- example: skip REASON -->`, or `<!-- example: slow -->` if it ends within 10 minutes")
    return run.returncode, out, err


def test_an_example_that_does_not_end_is_ended_with_what_it_started(tmp_path):
    pid_file = tmp_path / "server.pid"
    server = Example("p.md", 1, "shell", f"sleep 60 & echo $! > {pid_file}; wait\n")
    with pytest.raises(pytest.fail.Exception, match=r"p.md:1 still ran after 1 s .*example: skip"):
        run_example(server, tmp_path, limit=1)
    pid = int(pid_file.read_text())
    assert gone_within(pid, seconds=10), "the example's background `sleep` outlived it"
    assert not gone_within(os.getpid(), seconds=0.2)  # the check does see a live process


def gone_within(pid: int, seconds: float) -> bool:
    """Whether process `pid` has ended (exited, or killed and waiting to be reaped) within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False
