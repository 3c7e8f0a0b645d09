"""options.json: the biLM's hyper-parameters (docs/format.md section 3.1), read and checked once."""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from elmo.errors import ModelFileError
from elmo.files.fileio import atomic_path, read_json

from .chars import MAX_CHARS


@dataclass(frozen=True)
class TokenInput:
    """Token inputs other than bilm-tf's UTF-8 bytes: ELMoForManyLangs models (src/elmo/formats/manylangs.py).

    Their tokens are ids in their own character lexicon (`char.dic`) and, beside the char CNN, a
    word embedding looked up in their word lexicon (`word.dic`); either may be absent (0 rows).
    Their `nn.Linear` projections exist even where the widths agree, so `projections` forces both
    the token projection and the LSTM cell projection.
    """

    char_rows: int  # characters in the lexicon; 0: the model reads no characters
    char_pad: int  # lexicon id of <pad>, which fills a token's unused character slots
    word_rows: int  # words in the lexicon; 0: no word embedding
    word_dim: int
    projections: bool = True


@dataclass(frozen=True)
class BiLMConfig:
    """The architecture an options.json describes. `raw` keeps every key, training ones included.

    `token_input` is None for the original byte-level models; it is left out of repr() so that the
    fingerprints of those models (caches, part files) do not change with it.
    """

    char_dim: int
    filters: tuple[tuple[int, int], ...]
    n_highway: int
    activation: str
    max_chars: int
    dim: int
    projection_dim: int
    n_layers: int
    cell_clip: float | None
    proj_clip: float | None
    use_skip_connections: bool
    raw: dict
    token_input: TokenInput | None = field(default=None, repr=False)
    source: str = field(default="the options", repr=False, compare=False)  # the file, for error messages

    @property
    def n_filters(self) -> int:
        return sum(n for _, n in self.filters)

    @property
    def word_dim(self) -> int:
        return self.token_input.word_dim if self.token_input is not None else 0

    @property
    def reads_chars(self) -> bool:
        return self.token_input is None or self.token_input.char_rows > 0

    @property
    def token_features(self) -> int:
        """Width of the token encoder's output before its projection: [word embedding; char features]."""
        return self.word_dim + (self.n_filters if self.reads_chars else 0)

    @property
    def ids_width(self) -> int:
        """Ids per token: the character slots, after one word-id column when the model has words."""
        return (1 if self.word_dim else 0) + (self.max_chars if self.reads_chars else 0)

    @property
    def has_cnn_projection(self) -> bool:
        forced = self.token_input is not None and self.token_input.projections
        return forced or self.token_features != self.projection_dim

    @property
    def has_lstm_projection(self) -> bool:
        forced = self.token_input is not None and self.token_input.projections
        return forced or self.projection_dim != self.dim

    @property
    def output_dim(self) -> int:
        """Width of every output layer: [forward; backward]."""
        return 2 * self.projection_dim

    def to_options(self) -> dict:
        return copy.deepcopy(self.raw)

    @classmethod
    def from_options(cls, options: Any, source: str = "options") -> BiLMConfig:
        def fail(what: str) -> ModelFileError:
            return ModelFileError(f"{source}: {what}")

        if not isinstance(options, dict):
            raise fail(f"expected a JSON object, found {type(options).__name__}")
        lstm, cnn = config_section(options, "lstm", source), config_section(options, "char_cnn", source)
        embedding = cnn.get("embedding")
        if not isinstance(embedding, dict):
            raise fail("missing object 'char_cnn.embedding' (with key 'dim')")
        filters = config_filters(cnn, "char_cnn", source)
        max_chars = config_int(cnn, "max_characters_per_token", "char_cnn", source, default=MAX_CHARS)
        if max_chars != MAX_CHARS:
            raise fail(f"'char_cnn.max_characters_per_token' must be {MAX_CHARS}, found {max_chars}")
        widest = max(w for w, _ in filters)
        if widest > max_chars:
            raise fail(f"filter width {widest} is wider than a token ({max_chars} characters)")
        activation = cnn.get("activation", "relu")
        if activation not in ("relu", "tanh"):
            raise fail(f"'char_cnn.activation' must be 'relu' or 'tanh', found {activation!r}")
        n_characters = cnn.get("n_characters", 262)
        if n_characters not in (261, 262):
            raise fail(f"'char_cnn.n_characters' must be 261 or 262, found {n_characters!r}")
        n_highway = cnn.get("n_highway") or 0
        if isinstance(n_highway, bool) or not isinstance(n_highway, int) or not 0 <= n_highway < 2**31:
            raise fail(f"'char_cnn.n_highway' must be a non-negative integer, found {repr(n_highway)[:40]}")
        skip = lstm.get("use_skip_connections", False)
        if not isinstance(skip, bool):
            raise fail(f"'lstm.use_skip_connections' must be true or false, found {skip!r}")
        dim = config_int(lstm, "dim", "lstm", source)
        config = cls(
            char_dim=config_int(embedding, "dim", "char_cnn.embedding", source),
            filters=filters,
            n_highway=n_highway,
            activation=activation,
            max_chars=max_chars,
            dim=dim,
            projection_dim=config_int(lstm, "projection_dim", "lstm", source, default=dim),
            n_layers=config_int(lstm, "n_layers", "lstm", source, default=1),
            cell_clip=config_clip(lstm, "cell_clip", "lstm", source),
            proj_clip=config_clip(lstm, "proj_clip", "lstm", source),
            use_skip_connections=skip,
            raw=copy.deepcopy(options),
            source=source,
        )
        return config

    @property
    def token_parameters(self) -> int:
        """Weights of the token encoder: character and word embeddings, char CNN, highway, projection."""
        nf, p = self.n_filters, self.projection_dim
        char_rows = 262 if self.token_input is None else self.token_input.char_rows
        count = self.word_dim * (self.token_input.word_rows if self.token_input is not None else 0)
        if self.reads_chars:
            count += char_rows * self.char_dim + sum(n * (w * self.char_dim + 1) for w, n in self.filters)
            count += self.n_highway * 2 * nf * (nf + 1)
        return count + ((self.token_features + 1) * p if self.has_cnn_projection else 0)

    @property
    def lstm_parameters(self) -> int:
        """Weights of both LSTM directions: input and recurrent matrices, biases, cell projections."""
        p, d = self.projection_dim, self.dim
        return 2 * self.n_layers * (4 * d * (2 * p + 1) + (d * p if self.has_lstm_projection else 0))

    def parameter_count(self) -> int:
        """The biLM's weights (token encoder and both LSTM directions), not the softmax."""
        return self.token_parameters + self.lstm_parameters

    @property
    def forward_flops_per_token(self) -> float:
        """Multiply-adds x 2 of one token through the char CNN, highways, projection and both LSTM stacks."""
        nf, p, d = self.n_filters, self.projection_dim, self.dim
        macs = 0
        if self.reads_chars:
            macs += sum((self.max_chars - w + 1) * w * self.char_dim * n for w, n in self.filters)
            macs += self.n_highway * 2 * nf * nf
        macs += self.token_features * p if self.has_cnn_projection else 0
        macs += 2 * self.n_layers * (2 * p * 4 * d + (d * p if self.has_lstm_projection else 0))
        return 2.0 * macs

    def train_flops_per_token(self, negatives: int) -> float:
        """Forward FLOPs plus both directions' sampled-softmax logits, times 3 for forward + backward."""
        return 3.0 * (self.forward_flops_per_token + 2 * 2 * self.projection_dim * (negatives + 1))


# The checks of a model's JSON config, shared by options.json and ELMoForManyLangs' architecture JSON:
# each raises a ModelFileError naming the source, the key and what was found.

def config_section(parent: Any, name: str, source: str) -> dict:
    value = parent.get(name) if isinstance(parent, dict) else None
    if not isinstance(value, dict):
        found = type(value).__name__ if value is not None else "nothing"
        raise ModelFileError(f"{source}: expected an object '{name}', found {found}")
    return value


def config_int(sec: dict, key: str, where: str, source: str, minimum: int = 1, maximum: int = 2**31 - 1,
               default: Any = ...) -> int:
    """An integer in [minimum, maximum]; `default` when the key is absent (`...`: the key is required)."""
    value = sec.get(key, default)
    if value is ...:
        raise ModelFileError(f"{source}: missing key '{where}.{key}'")
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:  # 10**400 too
        expected = ("a positive integer below 2**31" if (minimum, maximum) == (1, 2**31 - 1)
                    else f"an integer from {minimum} to {maximum}")
        raise ModelFileError(f"{source}: '{where}.{key}' must be {expected}, found {repr(value)[:40]}")
    return value


def config_clip(sec: dict, key: str, where: str, source: str) -> float | None:
    """A cell or projection clip: absent, null or 0 means none (AllenNLP's and ELMoForManyLangs' convention)."""
    value = sec.get(key)
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        # NaN passes `value < 0` and would clip every cell to NaN
        raise ModelFileError(f"{source}: '{where}.{key}' must be a finite non-negative number or null, found {value!r}")
    return float(value)


def config_filters(sec: dict, where: str, source: str, maximum: int = 2**31 - 1) -> tuple[tuple[int, int], ...]:
    """The char CNN's [width, count] pairs, each number in [1, maximum]."""
    filters = sec.get("filters")
    if (
        not isinstance(filters, list)
        or not filters
        or not all(isinstance(f, (list, tuple)) and len(f) == 2 for f in filters)
        or not all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= maximum for f in filters for x in f)
    ):
        raise ModelFileError(f"{source}: '{where}.filters' must be a non-empty list of [width, count] pairs, "
                             f"found {repr(filters)[:80]}")
    return tuple((int(w), int(n)) for w, n in filters)


def read_options(path: str | os.PathLike) -> BiLMConfig:
    """Parse and check an options.json file; errors name the file and the problem."""
    path = os.fspath(path)
    return BiLMConfig.from_options(read_json(path, "options file"), source=path)


def write_options(config: BiLMConfig | dict, path: str | os.PathLike) -> None:
    options = config.to_options() if isinstance(config, BiLMConfig) else config
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(options, f, indent=2)
        f.write("\n")
