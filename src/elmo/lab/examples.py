"""The lab's own example inputs: ambiguous words in sentences that settle their sense.

These are the panels' starting points (the page offers them as presets) and the stand-in reference
sentences when the shared data is absent. The "bank" set is docs/lab.md's example.
"""

from __future__ import annotations

from .inputs import tokenize

# word -> [(sense label, sentence)], two sentences per sense.
AMBIGUOUS: dict[str, list[tuple[str, str]]] = {
    "bank": [
        ("river", "He sat by the river bank and watched the water ."),
        ("river", "The boat drifted toward the muddy bank of the stream ."),
        ("money", "She went to the bank to deposit her money ."),
        ("money", "The bank raised its interest rates again ."),
    ],
    "play": [
        ("theatre", "We saw a play by Shakespeare at the theatre last night ."),
        ("theatre", "The actors rehearsed the new play for weeks ."),
        ("game", "The children play football in the park every day ."),
        ("game", "They play chess after dinner ."),
    ],
    "bat": [
        ("animal", "A bat flew out of the cave at dusk ."),
        ("animal", "The bat hangs upside down while it sleeps ."),
        ("sport", "He swung the bat and hit the ball over the fence ."),
        ("sport", "She bought a new cricket bat for the season ."),
    ],
}

EXTRA = [
    "The quick brown fox jumps over the lazy dog .",
    "Prices fell sharply after the announcement on Monday .",
    "He will play the piano at the concert tomorrow .",
]

EXAMPLE_SENTENCES: list[list[str]] = [tokenize(text) for pairs in AMBIGUOUS.values() for _, text in pairs] + [
    tokenize(text) for text in EXTRA
]
