"""`elmo perplexity`: full-softmax perplexity of both LMs on held-out text (bilm-tf's run_test).

Every sentence contributes its words plus one end marker as targets in each direction. `stream`
mode carries the LSTM state from sentence to sentence in each batch row, as bilm-tf's test does;
`sentence` mode starts every sentence from zero state. `average` is exp of the mean of the two
cross-entropies (the geometric mean of the perplexities), what bilm-tf prints.
"""

from __future__ import annotations

import math
import os
import sys

import torch

from ..models import TrainingRun, resolve
from .data import SentenceBatcher, SentenceSource, StreamBatcher, expand_corpus
from .export import load_model_dir, load_run
from .model import LanguageModel, detach_states
from .vocab import Vocab

PERPLEXITY_MODES = ("stream", "sentence")  # the state carried across sentences per row, or each from zero


def load_for_scoring(model: str | os.PathLike, vocab_file: str | os.PathLike | None = None) -> tuple[LanguageModel, Vocab]:
    """A training run directory (latest checkpoint), a MODEL_DIR or a bundled model name."""
    resolved = resolve(model)
    if isinstance(resolved, TrainingRun):
        lm, vocab, _ = load_run(resolved.directory)
        return lm, (Vocab.load(vocab_file) if vocab_file else vocab)
    return load_model_dir(resolved.original_files(), vocab_file)


@torch.no_grad()
def perplexity(model: LanguageModel, vocab: Vocab, test: list[str] | str, mode: str = "stream", batch_size: int = 128,
               unroll: int = 20, device: str | torch.device = "cpu", progress: bool = False) -> dict:
    if mode not in PERPLEXITY_MODES:
        raise ValueError(f"mode must be one of {PERPLEXITY_MODES}, found {mode!r}")
    model = model.to(device).eval()
    source = SentenceSource(expand_corpus(test), shuffle=False, loop=False)
    streaming = mode == "stream"
    batcher = StreamBatcher(source, vocab, batch_size, unroll) if streaming else SentenceBatcher(source, vocab, batch_size)
    total_f = total_b = 0.0
    count, states = 0, None
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(unit=" tok", unit_scale=True, desc="perplexity", mininterval=1.0, file=sys.stderr)
    while (batch := batcher.next_batch()) is not None:
        nll_f, nll_b, new_states = model(batch.to(device), states, streaming)
        total_f += nll_f.double().sum().item()
        total_b += nll_b.double().sum().item()
        count += batch.n_tokens
        states = detach_states(new_states) if streaming else None
        if bar is not None:
            bar.update(batch.n_tokens)
            bar.set_postfix_str(f"ppl fwd {math.exp(total_f / count):.1f} bwd {math.exp(total_b / count):.1f}", refresh=False)
    if bar is not None:
        bar.close()
    source.close()
    return {"forward": math.exp(total_f / count), "backward": math.exp(total_b / count),
            "average": math.exp(0.5 * (total_f + total_b) / count), "tokens": count, "mode": mode}
