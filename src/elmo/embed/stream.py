"""Embed a text file into HDF5 in one stream, in the layout of AllenNLP's former `allennlp elmo` command
(docs/format.md 6.2): the library's `embed_file`, `ElmoEmbedder.embed_file` and `elmo embed --stateful`.

What each line's dataset holds and the checks on OUTPUT are `elmo.embed.output_file` (shared with the line-range parts of
`elmo.embed.corpus`, so both write the same datasets); INPUT (its checks, state and line limits) is
`elmo.embed.input_file.EmbedInput`; how lines become vectors is `elmo.embed.long_lines.embed_lines`.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from tqdm import tqdm

from elmo.files.fileio import hdf5_output, output_lock

from .embedder import Embedder, check_batch_size
from .input_file import EmbedInput, LineLimits
from .long_lines import embed_lines
from .output_file import OutputSpec, check_output, check_sentence_key, index_key, remove_temporaries, write_index


def embed_file(
    embedder: Embedder,
    input_file: str | os.PathLike,
    output_file: str | os.PathLike,
    output_format: str = "all",
    batch_size: int = 64,
    forget_sentences: bool = False,
    use_sentence_keys: bool = False,
    overwrite: bool = True,
    progress: bool = True,
    *,
    layers: Sequence[int] | None = None,
    pool: str | None = None,
    dtype: str = "float32",
    compression: str | None = None,
    context: str = "sentence",
    limits: LineLimits | None = None,
) -> None:
    """Write one dataset per input line: (L+1, n, D) for "all", (n, D) for "top"/"average".

    Keys are 0-based line numbers (or the stripped sentence with `use_sentence_keys`); an empty line
    gives an empty dataset, so keys stay aligned with lines. Unless `forget_sentences` or
    `use_sentence_keys`, a `sentence_to_index` dataset maps each sentence to its key. The file is
    written under a temporary name and renamed at the end. See `OutputSpec` for the other options,
    `embed_lines` for `context`, `embed_input.LineLimits` for `limits`.
    """
    spec = OutputSpec(output_format, None if layers is None else tuple(layers), pool, dtype, compression)
    check_batch_size(batch_size)
    source = EmbedInput.open(input_file, limits)
    output_file = check_output(output_file, overwrite, source.path)
    with output_lock(output_file):  # one writer per output
        remove_temporaries(output_file)  # a killed run's OUTPUT-sized temporary
        _, n_tokens = source.count()  # also validates UTF-8 before any work is done
        write_lines(embedder, source.lines(), output_file, spec, batch_size=batch_size,
                    forget_sentences=forget_sentences, use_sentence_keys=use_sentence_keys, progress=progress,
                    total_tokens=n_tokens, source=source.path, context=context, before_rename=source.check_unchanged)


def write_lines(
    embedder: Embedder,
    lines: Iterable[tuple[int, str]],
    output_file: str,
    spec: OutputSpec,
    batch_size: int = 64,
    forget_sentences: bool = False,
    use_sentence_keys: bool = False,
    progress: bool = True,
    total_tokens: int | None = None,
    source: str = "input",
    context: str = "sentence",
    before_rename: Callable[[], None] = lambda: None,
) -> None:
    """Embed (line number, text) pairs in one stream and write them atomically to `output_file`
    (`before_rename` may still refuse the result: nothing is then written).

    Memory is bounded by the embedder's window and each line's output, except the `sentence_to_index`
    dict, which holds every distinct sentence (`index_key`: at most MAX_INDEX_KEY_CHARS characters of one)
    until the end (pass `forget_sentences` for corpora too big for that).
    """
    spec.check_model(embedder.bilm.num_layers)
    keep_index = not (forget_sentences or use_sentence_keys)
    texts: dict[str, str] = {}
    pending: deque[tuple[int, str]] = deque()

    def numbered():  # remember each line's number and text until its vectors come back
        for number, text in lines:
            pending.append((number, text.strip()))
            yield number, text

    bar = tqdm(total=total_tokens, unit="tok", unit_scale=True, desc="embedding", disable=not progress,
               dynamic_ncols=True)
    with bar, hdf5_output(output_file, spec.libver) as (out, check_written):
        for vectors in embed_lines(embedder, numbered(), batch_size, context, source):
            number, sentence = pending.popleft()
            key = sentence if use_sentence_keys else str(number)
            if use_sentence_keys:
                check_sentence_key(out, key, source, number)
            spec.write(out, key, vectors)
            check_written()
            if keep_index:
                texts[index_key(sentence)] = key
            bar.update(vectors.shape[1])
        if keep_index:
            write_index(out, texts)
        before_rename()
