"""ELMo on Ray Data: a callable class for `Dataset.map_batches` (docs/at-scale.md).

    import ray
    from elmo.integrations.ray import ElmoBatchEmbedder

    ds = ray.data.read_parquet("s3://bucket/sentences/")            # an `id` and a `text` column
    ds = ds.map_batches(ElmoBatchEmbedder, fn_constructor_kwargs={"pool": "mean", "output_format": "average"},
                        concurrency=8, num_cpus=1, batch_size=256)
    ds.write_parquet("s3://bucket/vectors/")

Each actor loads the model once and sets torch's threads to the CPUs Ray gave it. A row's vectors are exactly
those `elmo embed` writes for the same line (the same `Embedder`, the same long-line windows, the same
`OutputSpec`: layers, averaging, pooling, dtype): every column of the batch is kept (the row id with it) and
one column is added, fixed-shape tensors when pooled, variable-shaped tensors (k, n, D) per row otherwise.
This module imports Ray only where a Ray worker's CPUs are asked for; `import ray` belongs to the user.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from elmo.embed.embedder import Embedder, check_batch_size
from elmo.embed.input_file import MAX_LINE_TOKENS
from elmo.embed.long_lines import embed_sentences_windowed
from elmo.embed.output_file import OutputSpec
from elmo.errors import InputError
from elmo.model.threads import default_threads, set_threads

OUTPUT_COLUMN = "elmo"


def actor_cpus() -> int:
    """The CPUs Ray assigned to this worker (its `num_cpus`), else `elmo.model.threads.default_threads()`."""
    try:
        import ray

        if ray.is_initialized():
            cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
            if cpus:
                return max(1, int(cpus))
    except ImportError:
        pass
    return default_threads()


def row_tokens(value: object, column: str, row: int, from_text: bool) -> list[str]:
    """One row's tokens: a text split on whitespace, or a list of token strings; else one clear line."""
    if from_text:
        if not isinstance(value, str):
            raise InputError(f"column {column!r}, row {row}: expected a text string, found {type(value).__name__} "
                             f"{str(value)[:40]!r}")
        return value.split()
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise InputError(f"column {column!r}, row {row}: expected a list of token strings, found "
                         f"{type(value).__name__} {str(value)[:40]!r}")
    tokens = list(value)
    for token in tokens:
        if not isinstance(token, str):
            raise InputError(f"column {column!r}, row {row}: tokens must be strings, found {type(token).__name__} "
                             f"{token!r:.40}")
    return tokens


def tensor_column(arrays: list[np.ndarray], pooled: bool) -> np.ndarray:
    """Pooled: one (N, ...) array, which Ray stores as a fixed-shape tensor column. Per token: an object array
    of the rows' arrays, which Ray stores as a variable-shaped tensor column."""
    if pooled:
        return np.stack(arrays)
    column = np.empty(len(arrays), dtype=object)
    column[:] = arrays
    return column


class ElmoBatchEmbedder:
    """`Dataset.map_batches(ElmoBatchEmbedder, fn_constructor_kwargs={...}, concurrency=N, num_cpus=T)`.

    `model`: any model reference `elmo embed --model` takes (None: the bundled model). `text_column` holds
    whitespace-tokenized text; or give `tokens_column` (lists of strings). `output_format` ("all", "top",
    "average"), `layers` (e.g. (1, 2)), `pool` (None, "mean", "max") and `dtype` are `elmo embed`'s --all/--top/
    --average, --layers, --pool and --dtype. `threads`: None takes the actor's CPUs. `batch_size`: sentences per
    forward pass (Ray's own `batch_size` is the rows per call).
    """

    def __init__(self, model: str | os.PathLike | None = None, *, text_column: str = "text",
                 tokens_column: str | None = None, output_column: str = OUTPUT_COLUMN, output_format: str = "all",
                 layers: Sequence[int] | None = None, pool: str | None = None, dtype: str = "float32",
                 int8: bool = False, batch_size: int = 64, threads: int | None = None,
                 max_tokens: int = MAX_LINE_TOKENS):
        self.spec = OutputSpec(output_format, None if layers is None else tuple(layers), pool, dtype)
        self.batch_size = check_batch_size(batch_size)
        self.threads = set_threads(actor_cpus() if threads is None else threads)
        self.embedder = Embedder.from_model(model, int8=int8, batch_size=self.batch_size, threads=self.threads)
        self.spec.check_model(self.embedder.bilm.num_layers)
        self.column = tokens_column or text_column
        self.from_text = tokens_column is None
        self.output_column = output_column
        self.max_tokens = max_tokens

    def sentences(self, batch: Mapping[str, object]) -> list[list[str]]:
        if self.column not in batch:
            raise InputError(f"the batch has no column {self.column!r} (its columns: {', '.join(map(str, batch))}); "
                             f"name the column of the {'text' if self.from_text else 'tokens'} with "
                             f"{'text_column' if self.from_text else 'tokens_column'}=")
        sentences = [row_tokens(v, self.column, i, self.from_text) for i, v in enumerate(batch[self.column])]
        for i, tokens in enumerate(sentences):
            if len(tokens) > self.max_tokens:
                raise InputError(f"column {self.column!r}, row {i}: {len(tokens):,} tokens, more than max_tokens "
                                 f"{self.max_tokens:,}")
        return sentences

    def embed(self, sentences: list[list[str]]) -> list[np.ndarray]:
        """The arrays `elmo embed` stores for these lines (`embed_file.embed_lines`' sentence path + the spec)."""
        return [self.spec.apply(layers)
                for layers in embed_sentences_windowed(self.embedder, sentences, self.batch_size)]

    def __call__(self, batch: dict) -> dict:
        arrays = self.embed(self.sentences(batch))
        return {**batch, self.output_column: tensor_column(arrays, self.spec.pool is not None)}


def read_vectors(table, column: str = OUTPUT_COLUMN) -> list[np.ndarray]:
    """One array per row of a pyarrow Table read from `elmo embed-dataset`'s parts (`pyarrow.parquet.read_table`,
    with `ray.data` imported so that Ray's tensor types are known): (k, n, D) per token, (D,) or (k, D) pooled."""
    arrays: list[np.ndarray] = []
    for chunk in table.column(column).chunks:
        arrays.extend(chunk.to_numpy())
    return arrays
