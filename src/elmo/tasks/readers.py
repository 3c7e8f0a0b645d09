"""Readers for the task data sets: every one returns a list of `Example`s and names file and line on bad input.

CoNLL-2003 NER (IOB1 converted to IOB2), CoNLL-2000 (PTB POS column), UD English-EWT (UPOS) and
SST-5 (PTB sentiment trees -> tokens + root label). The WSD data have their own module (`wsd_data`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from elmo.embed.documents import DOCSTART
from elmo.errors import InputError
from elmo.files.fileio import iter_lines, open_text


@dataclass
class Example:
    """One sentence: its tokens and either one tag per token or one label for the sentence; `document`
    numbers its document in the file (CoNLL-2003's -DOCSTART-, CoNLL-U's `# newdoc`), None where the
    file marks none (features with document context need it)."""

    tokens: list[str]
    tags: list[str] | None = None
    label: str | None = None
    document: int | None = None


def next_document(document: int | None) -> int:
    return 0 if document is None else document + 1


def iob1_to_iob2(tags: list[str]) -> list[str]:
    """IOB1 (an entity starts with I- unless it follows one of the same type) -> IOB2 (always B- first).

    In IOB1 a B-X only separates two adjacent entities of type X, so I-X begins an entity whenever
    the previous tag is not of type X; a B-X (even after O, as a few CoNLL-2003 tags are) begins one too.
    """
    out = []
    previous = "O"
    for tag in tags:
        if tag == "O":
            out.append(tag)
        else:
            prefix, _, kind = tag.partition("-")
            if prefix not in ("B", "I") or not kind:
                raise ValueError(f"not an IOB tag: {tag!r}")
            starts = prefix == "B" or previous == "O" or previous[2:] != kind
            out.append(("B-" if starts else "I-") + kind)
        previous = tag
    return out


def numbered_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) read in text mode (fast); invalid UTF-8 is re-scanned to name its line."""
    try:
        with open_text(path) as f:
            for number, line in enumerate(f, 1):
                yield number, line.rstrip("\r\n")
    except UnicodeDecodeError:
        for _ in iter_lines(path):  # raises an InputError naming the line and byte
            pass
        raise


def _column_blocks(path: str | os.PathLike, n_columns: int) -> Iterator[list[tuple[int, list[str]]]]:
    """Blank-line separated blocks of (line number, columns) rows; checks the column count."""
    block: list[tuple[int, list[str]]] = []
    for number, line in numbered_lines(path):
        if not line.strip():
            if block:
                yield block
            block = []
            continue
        columns = line.split()
        if len(columns) != n_columns:
            raise InputError(f"{path}, line {number}: expected {n_columns} columns, found {len(columns)}: {line!r}")
        block.append((number, columns))
    if block:
        yield block


def _check(path, examples: list[Example], what: str) -> list[Example]:
    if not examples:
        raise InputError(f"{path}: no sentences found (expected {what})")
    return examples


def read_conll2003(path: str | os.PathLike, limit: int | None = None) -> list[Example]:
    """word POS chunk NE per line; -DOCSTART- lines start a document and are skipped; NE tags converted
    from IOB1 to IOB2.

    `limit` (here and in the other readers): stop after that many sentences."""
    examples = []
    document = None
    for block in _column_blocks(path, 4):
        if limit is not None and len(examples) >= limit:
            break
        rows = [(n, c) for n, c in block if c[0] != DOCSTART]
        if len(rows) < len(block):
            document = next_document(document)
        if not rows:
            continue
        for n, c in rows:
            tag = c[3]
            if tag != "O" and (tag[:2] not in ("B-", "I-") or len(tag) < 3):
                raise InputError(f"{path}, line {n}: expected an IOB1 NE tag (O, I-XXX or B-XXX), found {tag!r}")
        examples.append(Example([c[0] for _, c in rows], iob1_to_iob2([c[3] for _, c in rows]), document=document))
    return _check(path, examples, "CoNLL-2003 4-column lines")


def read_conll2000(path: str | os.PathLike, limit: int | None = None) -> list[Example]:
    """word POS chunk per line: the PTB POS column becomes the tags."""
    examples = []
    for block in _column_blocks(path, 3):
        if limit is not None and len(examples) >= limit:
            break
        examples.append(Example([c[0] for _, c in block], [c[1] for _, c in block]))
    return _check(path, examples, "CoNLL-2000 3-column lines")


def read_conllu(path: str | os.PathLike, column: str = "upos", limit: int | None = None) -> list[Example]:
    """CoNLL-U syntactic words (range and empty-node lines skipped); tags from UPOS or XPOS; a
    `# newdoc` comment starts a document."""
    index = {"upos": 3, "xpos": 4}[column]
    examples, tokens, tags, document = [], [], [], None
    for number, line in numbered_lines(path):
        if not line.strip():
            if tokens:
                examples.append(Example(tokens, tags, document=document))
                if limit is not None and len(examples) >= limit:
                    return examples
            tokens, tags = [], []
            continue
        if line.startswith("#"):
            if line.startswith("# newdoc"):
                document = next_document(document)
            continue
        columns = line.split("\t")
        if len(columns) != 10:
            raise InputError(f"{path}, line {number}: expected 10 tab-separated CoNLL-U columns, "
                             f"found {len(columns)}: {line!r}")
        word_id = columns[0]
        if "-" in word_id or "." in word_id:
            continue
        if not word_id.isdigit():
            raise InputError(f"{path}, line {number}: expected a word ID (1, 2, ...), found {word_id!r}")
        tokens.append(columns[1])
        tags.append(columns[index])
    if tokens:
        examples.append(Example(tokens, tags, document=document))
    return _check(path, examples, "CoNLL-U")


def parse_sentiment_tree(text: str) -> tuple[str, list[str]]:
    """'(3 (2 It) (4 ...))' -> (root label, leaf tokens). Raises ValueError on a malformed tree."""
    tokens, stack, root = [], [], None
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "(":
            j = i + 1
            while j < n and not text[j].isspace() and text[j] not in "()":
                j += 1
            label = text[i + 1 : j]
            if not label:
                raise ValueError(f"a node without a label at column {i + 1}")
            if root is None:
                root = label
            elif not stack:
                raise ValueError(f"text after the root node closed, at column {i + 1}")
            stack.append(label)
            i = j
        elif ch == ")":
            if not stack:
                raise ValueError(f"unbalanced ')' at column {i + 1}")
            stack.pop()
            i += 1
        elif ch.isspace():
            i += 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in "()":
                j += 1
            if not stack:
                raise ValueError(f"a word outside any node at column {i + 1}")
            tokens.append(text[i:j])
            i = j
    if root is None:
        raise ValueError("no tree found")
    if stack:
        raise ValueError(f"{len(stack)} unclosed '(' at the end of the line")
    return root, tokens


def read_sst(path: str | os.PathLike, limit: int | None = None) -> list[Example]:
    """One PTB sentiment tree per line -> leaves and the root label (0-4)."""
    examples = []
    for number, line in numbered_lines(path):
        if limit is not None and len(examples) >= limit:
            break
        if not line.strip():
            continue
        try:
            label, tokens = parse_sentiment_tree(line)
        except ValueError as e:
            raise InputError(f"{path}, line {number}: malformed sentiment tree: {e}") from None
        if label not in {"0", "1", "2", "3", "4"}:
            raise InputError(f"{path}, line {number}: expected a root label 0-4, found {label!r}")
        examples.append(Example(tokens, label=label))
    return _check(path, examples, "one PTB sentiment tree per line")


def read_task_file(task: str, path: str | os.PathLike, limit: int | None = None) -> list[Example]:
    """The reader a task uses for a file: ner -> CoNLL-2003; pos -> CoNLL-U (UPOS) or CoNLL-2000; sst5 -> trees."""
    name = os.fspath(path)
    if task == "ner":
        return read_conll2003(name, limit=limit)
    if task == "pos":
        if name.endswith((".conllu", ".conllu.gz")):
            return read_conllu(name, limit=limit)
        return read_conll2000(name, limit=limit)
    if task == "sst5":
        return read_sst(name, limit=limit)
    raise ValueError(f"unknown task {task!r}")
