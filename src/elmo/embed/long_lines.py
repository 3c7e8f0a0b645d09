"""Long lines: one sentence embedded in windows of tokens with the LSTM state carried, exactly as in one piece.

`BiLM.forward` runs a sentence of n tokens in one call, so its activations (every step's gate inputs,
every layer's outputs, both directions, the reversed copies) grow with n: about 25 KB per token of one
line for the bundled model. Here the sentence is cut into windows of `LONG_LINE_WINDOW` tokens: the
forward stack reads `<S>` and then the windows left to right, the backward stack reads `</S>` and then
the windows right to left (each window reversed), every layer's (c, h) carried from one window to the
next (doc 4.5-4.6; the stacks are the biLM's own, so cell clipping, projections and skip connections are
the same code). Only each layer's outputs per token are kept, written into the one output array, so
memory grows with the line's output, (L+1) x n x 2P floats, plus one window's activations.

The vectors equal the one-piece path's (tests/test_long_lines.py holds them to 1e-6; with the BLAS
measured here they are bit for bit the same, since each column of a matrix product is summed alike
whatever the number of columns, once there are two: see `windows_of`). A stateful biLM's carried state
is not used: this is the stateless pass (`elmo embed` without `--stateful`).

`embed_lines` is how both writers of `elmo embed` (`elmo.embed.stream`, `elmo.embed.corpus`) turn a file's lines into
vectors: each line a sentence (a long one in windows, as above) or each line within its document.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch

from elmo.errors import InputError
from elmo.model.bilm import BiLM, LstmStack
from elmo.model.lstm_kernels import LstmState

from .documents import check_context, line_documents
from .embedder import Embedder

LONG_LINE_WINDOW = 512  # tokens: `elmo embed` embeds a longer line in windows of this many tokens


def check_window(window: object) -> int:
    if isinstance(window, bool) or not isinstance(window, int) or window < 2:
        raise InputError(f"window must be a number of tokens of at least 2, found {window!r}")
    return window


def windows_of(steps: int, window: int) -> list[tuple[int, int]]:
    """[lo, hi) pieces of `steps` LSTM steps, `window` each; a last piece of one step joins the one before.

    A one-step piece would make the gate product a matrix-vector product, which BLAS sums in another
    order than the one-piece path's matrix product (4 float32 ulps apart, measured); pieces of two or
    more steps give those columns bit for bit.
    """
    cuts = [*range(0, steps, window), steps]
    if len(cuts) > 2 and cuts[-1] - cuts[-2] == 1:
        del cuts[-2]
    return list(zip(cuts, cuts[1:]))


def _run(stack: LstmStack, x: torch.Tensor,
         states: list[LstmState] | None) -> tuple[list[torch.Tensor], list[LstmState]]:
    """One piece of steps (T, P) through a direction's stack from `states` -> per-layer outputs (T, P), final states."""
    outputs, finals = stack(x.unsqueeze(0), torch.tensor([x.shape[0]], device=x.device), states)
    return [o[0] for o in outputs], finals


def _token_vectors(bilm: BiLM, tokens: Sequence[str], device: torch.device) -> torch.Tensor:
    """Context-free vectors (n, P) of a window's tokens (the char encoder; its token cache is exact)."""
    ids = bilm.batch_to_ids([tokens]).to(device)
    return bilm.token_vectors(ids, (ids > 0).any(-1))[0]


@torch.no_grad()
def embed_in_windows(bilm: BiLM, tokens: Sequence[str], window: int = LONG_LINE_WINDOW,
                     bf16: bool = False) -> np.ndarray:
    """(L+1, n, 2P) float32 for one tokenized sentence, as `Embedder.embed_batch([tokens])[0]` gives it.

    Each direction reads n + 1 steps, its boundary vector (<S> forward, </S> backward) and then the
    tokens, in pieces of `window` steps (`windows_of`). `bf16`: bfloat16 autocast, as `Embedder(bf16=True)`.
    """
    check_window(window)
    device = bilm.char_encoder.char_embed.device
    n, p = len(tokens), bilm.config.projection_dim
    out = np.zeros((bilm.num_layers, n, 2 * p), dtype=np.float32)
    if n == 0:
        return out
    pieces = windows_of(n + 1, window)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        bos, eos = (v.float().unsqueeze(0) for v in bilm.boundary_vectors())
        states = None  # forward: step s reads token s - 1, pieces left to right; layer 0 is filled on the way
        for lo, hi in pieces:
            a, b = max(lo - 1, 0), hi - 1
            x = _token_vectors(bilm, tokens[a:b], device)
            out[0, a:b, :p] = out[0, a:b, p:] = x.float().cpu().numpy()
            layers, states = _run(bilm.forward_lstm, torch.cat([bos, x]) if lo == 0 else x, states)
            for k, layer in enumerate(layers, 1):
                out[k, a:b, :p] = layer[1 if lo == 0 else 0 :].float().cpu().numpy()
        states = None  # backward: step s reads token n - s, so pieces run right to left, each token last to first
        for lo, hi in pieces:
            a, b = n - hi + 1, n - max(lo, 1) + 1
            x = torch.from_numpy(out[0, a:b, :p][::-1].copy()).to(device)
            layers, states = _run(bilm.backward_lstm, torch.cat([eos, x]) if lo == 0 else x, states)
            for k, layer in enumerate(layers, 1):
                out[k, a:b, p:] = layer[1 if lo == 0 else 0 :].float().cpu().numpy()[::-1]
    return out


def embed_sentences_windowed(embedder: Embedder, sentences: Iterable[Sequence[str]], batch_size: int,
                             window: int = LONG_LINE_WINDOW) -> Iterator[np.ndarray]:
    """`embedder.embed_sentences(sentences, "all", batch_size)`, except that a sentence of more than `window`
    tokens is embedded by `embed_in_windows` (its batch slot holds an empty sentence instead)."""
    check_window(window)
    if embedder.stateful:  # a stateful row continues the batch row before it: no windows from zero state
        yield from embedder.embed_sentences(sentences, layers="all", batch_size=batch_size)
        return
    held: deque[Sequence[str] | None] = deque()  # per sentence in flight: the long one itself, or None

    def short_ones() -> Iterator[Sequence[str]]:
        for sentence in sentences:
            is_long = isinstance(sentence, (list, tuple)) and len(sentence) > window
            held.append(sentence if is_long else None)
            yield [] if is_long else sentence

    for vectors in embedder.embed_sentences(short_ones(), layers="all", batch_size=batch_size):
        long_sentence = held.popleft()
        yield vectors if long_sentence is None else embed_in_windows(embedder.bilm, long_sentence, window,
                                                                     embedder.bf16)


def embed_lines(embedder: Embedder, lines: Iterable[tuple[int, str]], batch_size: int, context: str = "sentence",
                source: str = "input", window: int = LONG_LINE_WINDOW) -> Iterator[np.ndarray]:
    """(L+1, n, D) per (line number, text), in order: each line a sentence on its own (context "sentence"; a
    line of more than `window` tokens runs in windows, as above, unless the embedder is stateful), or each line's
    vectors from its document ("document": blank and -DOCSTART- lines separate documents and get what an empty
    line gets, (L+1, 0, D); `batch_size` then counts documents; documents already run in windows of steps)."""
    if check_context(context) == "sentence":
        return embed_sentences_windowed(embedder, (text.split() for _, text in lines), batch_size, window)
    return embedder.embed_documents(line_documents(lines, source), layers="all", batch_size=batch_size)
