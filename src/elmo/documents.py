"""Documents: sentences that belong together, read as one text by each direction of the biLM.

In text files, a blank line or a `-DOCSTART-` line (CoNLL's marker) ends a document.
"""

from __future__ import annotations

DOCSTART = "-DOCSTART-"


def is_document_break(line: str) -> bool:
    """True for a line that separates documents rather than holding a sentence."""
    stripped = line.strip()
    return not stripped or stripped == DOCSTART
