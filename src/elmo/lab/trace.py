"""The character encoder taken apart, stage by stage, for "how a vector is built" (panel 2).

`char_stages` recomputes CharEncoder.forward (doc sections 4.1-4.4) one step at a time, keeping
what the single fused GEMM of the library hides: each filter's best position, the highway gates,
and the vector after every stage. A test checks its last stage equals the encoder's output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..bilm import CharEncoder
from ..chars import BOS_CHAR, BOW_CHAR, EOS_CHAR, EOW_CHAR, PAD_CHAR, batch_to_ids

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
    x = F.embedding(ids, enc.embedding_table())  # (N, 50, d)
    values, positions, widths = [], [], []
    for w, b in zip(enc.conv_weights, enc.conv_biases):
        width = w.shape[0]
        windows = x.unfold(1, width, 1)  # (N, 50 - width + 1, d, width)
        y = torch.einsum("npdw,wdf->npf", windows, w) + b
        best, pos = y.max(dim=1)
        values.append(best)
        positions.append(pos)
        widths += [width] * w.shape[2]
    pooled = torch.cat(values, dim=1)
    h = torch.relu(pooled) if enc.config.activation == "relu" else torch.tanh(pooled)
    cnn = h
    highway, gates = [], []
    for k in range(enc.config.n_highway):
        gate = torch.sigmoid(h @ enc.highway_carry_w[k] + enc.highway_carry_b[k])
        h = gate * torch.relu(h @ enc.highway_transform_w[k] + enc.highway_transform_b[k]) + (1.0 - gate) * h
        highway.append(h)
        gates.append(gate.mean(dim=1))
    projection = h @ enc.proj_w + enc.proj_b if enc.proj_w is not None else h
    return CharStages(cnn, torch.cat(positions, dim=1), widths, highway, gates, projection)


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
