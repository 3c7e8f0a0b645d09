"""The character encoder taken apart, stage by stage, for "how a vector is built" (panel 2).

`char_stages` runs CharEncoder's stages (docs/format.md sections 4.1-4.4) one at a time, keeping what its
forward discards: each filter's best position, the highway gates, and the vector after every
stage. A test checks its last stage equals the encoder's output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from elmo.model.bilm import CharEncoder
from elmo.model.chars import BOS_CHAR, BOW_CHAR, EOS_CHAR, EOW_CHAR, PAD_CHAR, batch_to_ids

MARKERS = {BOW_CHAR: "⟨", EOW_CHAR: "⟩", PAD_CHAR: "·", BOS_CHAR: "<S>", EOS_CHAR: "</S>"}


@dataclass
class CharStages:
    """Per token: `cnn` (N, n_filters) after max-pool and activation, `best_pos`/`widths` per filter,
    `highway` list of (N, n_filters) after each layer with its mean `gates`, `projection` (N, P)."""

    cnn: torch.Tensor
    best_pos: torch.Tensor
    widths: list[int]
    highway: list[torch.Tensor]
    gates: list[torch.Tensor]
    projection: torch.Tensor


@torch.no_grad()
def char_stages(enc: CharEncoder, tokens: list[str]) -> CharStages:
    ids = batch_to_ids([tokens])[0].to(enc.char_embed.device)  # (N, 50)
    pooled, best_pos = enc.filter_maxima(ids)
    widths = [w.shape[0] for w in enc.conv_weights for _ in range(w.shape[2])]
    h = cnn = enc.activation(pooled)
    highway, gates = [], []
    for k in range(enc.config.n_highway):
        h, gate = enc.highway(k, h)
        highway.append(h)
        gates.append(gate.mean(dim=1))
    return CharStages(cnn, best_pos, widths, highway, gates, enc.project(h))


def char_label(char_id: int) -> str:
    """A character id (shifted by +1, 0 = padding slot) as something printable."""
    code = char_id - 1
    if code in MARKERS:
        return MARKERS[code]
    if 0 <= code < 128:
        return chr(code)
    return f"\\x{code:02x}" if code >= 0 else ""


def ngram_text(char_ids: list[int], start: int, width: int) -> str:
    """The characters a filter of `width` saw from `start`, UTF-8 bytes decoded where they can be."""
    out, pending = [], bytearray()
    for cid in char_ids[start : start + width]:
        code = cid - 1
        if 0 <= code < 256:
            pending.append(code)
            continue
        if pending:
            out.append(pending.decode("utf-8", "replace"))
            pending = bytearray()
        out.append(MARKERS.get(code, "?"))
    if pending:
        out.append(pending.decode("utf-8", "replace"))
    return "".join(out)
