"""`elmo perplexity`: full-softmax perplexity of both LMs on held-out text (bilm-tf's run_test).

Every sentence contributes its words plus one end marker as targets in each direction. `stream`
mode carries the LSTM state from sentence to sentence in each batch row, as bilm-tf's test does;
`sentence` mode starts every sentence from zero state; `document` mode reads each document (blank
lines or `-DOCSTART-` lines separate them) from zero state, the backward LM over the reversed
document, as `elmo embed --context document` runs a model. `average` is exp of the mean of the two
cross-entropies (the geometric mean of the perplexities), what bilm-tf prints.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import torch

from elmo.errors import ElmoError, InputError, ModelFileError
from elmo.formats.lm_vocab import Vocab
from elmo.models import TrainingRun, resolve

from .batchers import DocumentBatcher, SentenceBatcher, StreamBatcher
from .corpus import DocumentSource, SentenceSource, expand_corpus
from .export import load_model_dir, load_run
from .model import LanguageModel, detach_states

# the state carried across sentences per row, each sentence from zero, or each document from zero
PERPLEXITY_MODES = ("stream", "sentence", "document")


def load_for_scoring(model: str | os.PathLike, vocab_file: str | os.PathLike | None = None) -> tuple[LanguageModel, Vocab]:
    """A training run directory (latest checkpoint), a MODEL_DIR or a bundled model name."""
    resolved = resolve(model)
    if isinstance(resolved, TrainingRun):
        lm, vocab, _ = load_run(resolved.directory)
        return lm, (Vocab.load(vocab_file) if vocab_file else vocab)
    files = resolved.original_files()
    try:
        return load_model_dir(files, vocab_file)
    except (InputError, ModelFileError) as e:
        raise _named_as_given(e, str(resolved.name), files.options_file.parent) from None


def _named_as_given(error: InputError | ModelFileError, given: str, folder: Path) -> ElmoError:
    """An error about files the resolver made (a checkpoint imported into the cache, an unpacked archive) names what
    the user gave first, and the cache folder only as where its copy lies."""
    message = str(error)
    if Path(given).resolve() == folder.resolve() or str(folder) not in message:
        return error
    message = message.replace(f"{folder}: ", "").replace(f"{folder}{os.sep}", "").replace(str(folder), "its copy")
    return type(error)(f"{given} (its model files in {folder}): {message}")


@torch.no_grad()
def perplexity(model: LanguageModel, vocab: Vocab, test: list[str] | str, mode: str = "stream", batch_size: int = 128,
               unroll: int = 20, device: str | torch.device = "cpu", progress: bool = False,
               complete_batches: bool = False) -> dict:
    """Every target of `test` scored (`tokens`), or with `complete_batches` bilm-tf's run_test exactly: stream mode one
    step at a time, and the batch in which the text runs out dropped with what follows, as its `_get_batch` does
    (`tokens` scored of `targets`)."""
    if mode not in PERPLEXITY_MODES:
        raise InputError(f"mode must be one of {PERPLEXITY_MODES}, found {mode!r}")
    if complete_batches and mode != "stream":
        raise InputError(f"bilm-tf's complete batches are a stream-mode count; --mode is {mode}")
    model = model.to(device).eval()
    files = expand_corpus(test)
    streaming = mode != "sentence"
    if mode == "document":
        documents = sum(1 for _ in DocumentSource(files, shuffle=False, loop=False))
        rows = min(batch_size, documents)  # every row runs each window: no more rows than documents
        batcher = DocumentBatcher(DocumentSource(files, shuffle=False, loop=False), vocab, rows, unroll)
    elif mode == "stream":
        batcher = StreamBatcher(SentenceSource(files, shuffle=False, loop=False), vocab, batch_size,
                                1 if complete_batches else unroll)
    else:
        batcher = SentenceBatcher(SentenceSource(files, shuffle=False, loop=False), vocab, batch_size)
    total_f = total_b = 0.0
    count, targets, states = 0, 0, None
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(unit=" tok", unit_scale=True, desc="perplexity", mininterval=1.0, file=sys.stderr)
    try:
        while (batch := batcher.next_batch()) is not None:
            targets += batch.n_tokens
            if complete_batches and (count < targets - batch.n_tokens or batch.n_tokens < batch_size):
                continue  # bilm-tf stops at the first batch a row cannot fill; only the count goes on
            nll_f, nll_b, new_states = model(batch.to(device), states, streaming)
            total_f += nll_f.double().sum().item()
            total_b += nll_b.double().sum().item()
            count += batch.n_tokens
            states = detach_states(new_states) if streaming else None
            if bar is not None:
                bar.update(batch.n_tokens)
                bar.set_postfix_str(f"ppl fwd {_exp(total_f / count):.1f} bwd {_exp(total_b / count):.1f}",
                                    refresh=False)
    finally:
        if bar is not None:
            bar.close()
        batcher.close()
    if count == 0:
        raise InputError(f"{', '.join(map(str, files))}: nothing to score ({targets} targets"
                         + (f", fewer than one complete batch of {batch_size}" if complete_batches else "") + ")")
    return {"forward": _exp(total_f / count), "backward": _exp(total_b / count),
            "average": _exp(0.5 * (total_f + total_b) / count), "tokens": count, "targets": targets, "mode": mode,
            "complete_batches": complete_batches}


def _exp(nats: float) -> float:
    """A perplexity; beyond float range (a wrecked model) it is infinite, not an OverflowError; NaN stays NaN."""
    if math.isnan(nats):
        return math.nan
    return math.exp(nats) if nats < 709.0 else math.inf


def scored_tokens(result: dict) -> str:
    """Which tokens a perplexity covers, in words: every target, or bilm-tf's complete batches of them."""
    if result.get("complete_batches"):
        return (f"{result['tokens']:,} of {result['targets']:,} targets: bilm-tf's complete batches, the batch in "
                f"which the text ran out dropped")
    return f"{result['tokens']:,} tokens: every target, {result['mode']} mode"
