"""What the lab accepts: request limits, a plain tokenizer, and checks that explain what is wrong.

Every rejection is a `LabInputError` with an HTTP status and a sentence a person can act on; the
server turns it into `{"error": ...}`. Limits keep one request cheap on a 2-core machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from elmo.errors import InputError


class LabInputError(InputError):
    """Bad input to a lab endpoint: `status` is the HTTP code (400 malformed, 408 too slow, 413 too large, 415 not JSON)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 16_384
    max_tokens: int = 60  # per sentence
    max_chars: int = 600  # per sentence, before tokenizing
    max_sentences: int = 8
    body_seconds: float = 10.0  # for a request body to arrive once its headers have
    max_running: int = 2  # model computations at once (`elmo lab --max-running`)
    max_waiting: int = 8  # computations waiting for one of those; more get 503 (`--max-waiting`)


# Words (with inner apostrophes, hyphens or dots: "don't", "well-known", "U.S") or single symbols.
_TOKEN = re.compile(r"\w+(?:['’\-.]\w+)*|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Split typed text into tokens close to the corpora's (Moses-like) tokenization."""
    return _TOKEN.findall(text)


def paragraph_sentences(value: Any, limits: Limits) -> list[list[str]]:
    """A paragraph as text -> its sentences' tokens, cut after each . ! or ?."""
    if not isinstance(value, str):
        raise LabInputError("'paragraph' must be a string")
    if len(value) > limits.max_chars * 2:
        raise LabInputError(f"the paragraph is {len(value)} characters long; the lab takes at most "
                            f"{limits.max_chars * 2}", 413)
    sentences: list[list[str]] = [[]]
    for token in tokenize(value):
        sentences[-1].append(token)
        if token in (".", "!", "?"):
            sentences.append([])
    sentences = [s for s in sentences if s]
    if not sentences:
        raise LabInputError("the paragraph is empty: type a few sentences, or leave it out")
    for n, tokens in enumerate(sentences, 1):
        if len(tokens) > limits.max_tokens:
            raise LabInputError(f"paragraph sentence {n} has {len(tokens)} tokens; the lab takes at most "
                                f"{limits.max_tokens}", 413)
    return sentences


def sentence_tokens(value: Any, limits: Limits, what: str = "sentence") -> list[str]:
    """A sentence given as text or as a list of tokens -> checked tokens."""
    if isinstance(value, str):
        if len(value) > limits.max_chars:
            raise LabInputError(f"{what} is {len(value)} characters long; the lab takes at most {limits.max_chars}",
                                413)
        tokens = tokenize(value)
    elif isinstance(value, list) and all(isinstance(t, str) and t and not t.isspace() for t in value):
        tokens = list(value)
        if sum(len(t) for t in tokens) > limits.max_chars:
            raise LabInputError(f"{what} has more than {limits.max_chars} characters; make it shorter", 413)
    else:
        raise LabInputError(f"{what} must be a string or a list of non-empty strings")
    if not tokens:
        raise LabInputError(f"{what} is empty: type a few words")
    if len(tokens) > limits.max_tokens:
        raise LabInputError(f"{what} has {len(tokens)} tokens; the lab takes at most {limits.max_tokens}", 413)
    return tokens


def field(payload: dict, name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    """payload[name], checked to be of `kind`; a missing field without default is an error."""
    if name not in payload:
        if default is ...:
            raise LabInputError(f"missing field '{name}'")
        return default
    value = payload[name]
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise LabInputError(f"field '{name}' has the wrong type (bool)")
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise LabInputError(f"field '{name}' must be {names}, found {type(value).__name__}")
    return value


def number_list(payload: dict, name: str, length: int, low: float, high: float) -> list[float]:
    values = field(payload, name, list)
    if len(values) != length or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise LabInputError(f"'{name}' must be a list of {length} numbers")
    if not all(low <= v <= high for v in values):
        raise LabInputError(f"each value of '{name}' must be between {low} and {high}")
    return [float(v) for v in values]


def token_index(payload: dict, tokens: list[str]) -> int:
    index = field(payload, "index", int)
    if not 0 <= index < len(tokens):
        raise LabInputError(f"'index' {index} is outside the sentence (0..{len(tokens) - 1})")
    return index
