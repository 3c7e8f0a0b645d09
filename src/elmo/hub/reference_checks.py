"""What every remote reference (a URL, `hf://...`) must look like before any library sees it: no control
characters, no `.` or `..` segments, no empty segments. A library handed such a name answers in its own terms (a raw
ValueError, a request for another file); refused here, the message names the reference, its control characters
shown escaped so that the line stays one line."""

from __future__ import annotations

import unicodedata
from urllib.parse import unquote

from elmo.errors import ModelFileError

SHOWN_CHARACTERS = 300  # a reference longer than this is cut in messages


def shown(text: str) -> str:
    """`text` for a message: control characters escaped (\\x00, \\n, \\x7f), cut at SHOWN_CHARACTERS."""
    out = "".join(repr(c)[1:-1] if unicodedata.category(c) == "Cc" else c for c in text[:SHOWN_CHARACTERS])
    return out + ("..." if len(text) > SHOWN_CHARACTERS else "")


def control_character(text: str) -> int | None:
    """The position of the first control character (C0, DEL, C1) in `text`, or None."""
    return next((i for i, c in enumerate(text) if unicodedata.category(c) == "Cc"), None)


def check_segments(reference: str, segments: list[str], what: str, expected: str) -> None:
    """Each segment (percent-decoded) is a name: not empty, not `.` or `..`, without a control character."""
    for segment in segments:
        name = unquote(segment)
        at = control_character(name)
        if at is not None:
            raise ModelFileError(f"{shown(reference)}: {what} holds the control character {name[at]!r}; "
                                 f"expected {expected}")
        if name in ("", ".", ".."):
            kind = "an empty segment" if not name else f"a {name!r} segment"
            raise ModelFileError(f"{shown(reference)}: {what} has {kind}; every part must name something "
                                 f"(expected {expected})")


def check_reference_text(reference: str, expected: str) -> None:
    """No control character anywhere in the reference (before it is split into parts)."""
    at = control_character(reference)
    if at is not None:
        raise ModelFileError(f"{shown(reference)}: a control character ({reference[at]!r}) at position {at}; "
                             f"expected {expected}")
