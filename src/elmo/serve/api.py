"""What the server's endpoints take and give: request checks that say what is wrong, and the answers.

`POST /v1/embeddings` follows OpenAI's embeddings API, so its clients work unchanged: `input` is a
string or a list of strings, each split on whitespace; `data[i].embedding` is the masked mean over the
string's tokens of the mean of the chosen layers (`elmo embed --average --pool mean`, with `--layers`),
as a list of floats or, with `"encoding_format": "base64"` (what OpenAI's Python client asks for),
base64 of little-endian float32. `POST /embed` takes token lists and gives each token's chosen layers.

Every answer's size is known before the model runs (tokens x layers x dimension), so it is bounded
before any work: a JSON-float answer over `max_answer_floats` numbers gets 413 (base64 is a fifth of the
size), and every answer's bytes are reserved against `max_answer_bytes` from admission until they are
sent (the app's `AnswerBudget`).
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from elmo.embed.output_file import OutputSpec
from elmo.lab.inputs import LabInputError

ENCODINGS = ("float", "base64")


@dataclass(frozen=True)
class ServeLimits:
    """One request's bounds and the line's; a request beyond them gets a 4xx naming the limit."""

    max_body_bytes: int = 4_000_000
    body_seconds: float = 10.0  # for a request body to arrive once its headers have
    max_request_tokens: int = 16_384  # tokens in one request, all its strings together
    max_inputs: int = 2048  # strings (or token lists) in one request, as OpenAI's API
    max_queue_tokens: int = 65_536  # tokens waiting for the model; more get 503 + Retry-After
    # numbers in one answer written as JSON text (~20 bytes each); 2**21 takes any /v1/embeddings request
    # of 2,048 inputs at dimension 1024; base64 answers are bounded by max_answer_bytes alone
    max_answer_floats: int = 2_097_152
    max_answer_bytes: int = 268_435_456  # answers being computed, built or sent at once, all requests together
    send_seconds: float = 30.0  # an answer's reader may stall this long before its connection is closed


@dataclass(frozen=True)
class ModelShape:
    """What the app needs to know of a model that runs elsewhere (worker processes)."""

    num_layers: int
    dim: int


JSON_FLOAT_BYTES = 24  # an upper estimate of one float32 as JSON text ("-0.012345678901234567," is 22)
BASE64_FLOAT_BYTES = 16 / 3  # 4 bytes as base64


class RequestError(LabInputError):
    """A refused request: `status` the HTTP code, `param` the field at fault and `code` as OpenAI's errors
    carry them."""

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None):
        super().__init__(message, status)
        self.param, self.code = param, code


def answer_bytes(floats: int, encoding: str) -> int:
    """The size an answer of `floats` numbers will have, estimated from above, before it exists."""
    return 1024 + math.ceil(floats * (JSON_FLOAT_BYTES if encoding == "float" else BASE64_FLOAT_BYTES))


def check_answer_size(floats: int, encoding: str, encoding_field: str, limits: ServeLimits) -> int:
    """The answer's estimated bytes, or a 413 when it could never be held."""
    if encoding == "float" and floats > limits.max_answer_floats:
        raise RequestError(f"this answer would hold {floats:,} numbers as JSON text; this server writes at most "
                           f"{limits.max_answer_floats:,} that way: ask for \"{encoding_field}\": \"base64\" (a "
                           "fifth of the size) or send fewer tokens", 413, encoding_field, "answer_too_large")
    size = answer_bytes(floats, encoding)
    if size > limits.max_answer_bytes:
        raise RequestError(f"this answer would be about {size / 2**20:,.0f} MiB; this server holds at most "
                           f"{limits.max_answer_bytes / 2**20:,.0f} MiB of answers at once: send fewer tokens",
                           413, None, "answer_too_large")
    return size


def encode(vector: np.ndarray, encoding: str) -> list | str:
    if encoding == "base64":
        return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector.tolist()


def _encoding(payload: dict, key: str) -> str:
    value = payload.get(key, "float")
    if value not in ENCODINGS:
        raise RequestError(f"'{key}' must be one of {', '.join(ENCODINGS)}, found {value!r}", param=key)
    return value


def _check_sizes(sentences: list[list[str]], limits: ServeLimits) -> None:
    if len(sentences) > limits.max_inputs:
        raise RequestError(f"{len(sentences)} inputs in one request; this server takes at most {limits.max_inputs}",
                           413, "input")
    tokens = sum(len(s) for s in sentences)
    if tokens > limits.max_request_tokens:
        raise RequestError(f"{tokens} tokens in one request; this server takes at most {limits.max_request_tokens} "
                           "(split the request)", 413, "input")


def _check_dimensions(payload: dict, dim: int) -> None:
    """OpenAI's `dimensions` (shortened vectors): only the model's own is possible here."""
    wanted = payload.get("dimensions")
    if wanted is not None and (isinstance(wanted, bool) or wanted != dim):
        raise RequestError(f"'dimensions' {wanted!r}: this model's vectors have {dim} dimensions and cannot be "
                           "shortened; leave 'dimensions' out or give " + str(dim), param="dimensions")


@dataclass(frozen=True)
class EmbeddingsRequest:
    """A checked `POST /v1/embeddings` body, with what its answer keeps (`output`) and its estimated size."""

    sentences: list[list[str]]
    encoding: str
    output: OutputSpec
    answer_bytes: int

    @classmethod
    def parse(cls, payload: dict[str, Any], limits: ServeLimits, shape: ModelShape,
              layers: tuple[int, ...] | None = None) -> EmbeddingsRequest:
        texts = payload.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            found = "nothing" if texts is None else f"{type(texts).__name__} {str(texts)[:40]!r}"
            raise RequestError(f"'input' must be a string or a non-empty list of strings, found {found} (token id "
                               "lists are not taken: this model reads characters)", param="input")
        model = payload.get("model")
        if model is not None and not isinstance(model, str):
            raise RequestError(f"'model' must be a string, found {type(model).__name__}", param="model")
        _check_dimensions(payload, shape.dim)
        sentences = [t.split() for t in texts]
        _check_sizes(sentences, limits)
        encoding = _encoding(payload, "encoding_format")
        size = check_answer_size(len(sentences) * shape.dim, encoding, "encoding_format", limits)
        return cls(sentences, encoding, OutputSpec("average", layers, pool="mean"), size)

    def answer(self, vectors: list[np.ndarray], layers: tuple[int, ...] | None, model: str) -> dict:
        """`vectors`: each input's pooled vector (the worker applied `output`)."""
        data = [{"object": "embedding", "index": i, "embedding": encode(vector, self.encoding)}
                for i, vector in enumerate(vectors)]
        tokens = sum(len(s) for s in self.sentences)
        return {"object": "list", "data": data, "model": model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


@dataclass(frozen=True)
class EmbedRequest:
    """A checked `POST /embed` body: {"sentences": [[token, ...], ...], "encoding": "float"|"base64"}."""

    sentences: list[list[str]]
    encoding: str
    output: OutputSpec
    answer_bytes: int

    @classmethod
    def parse(cls, payload: dict[str, Any], limits: ServeLimits, shape: ModelShape,
              layers: tuple[int, ...] | None = None) -> EmbedRequest:
        sentences = payload.get("sentences")
        if not isinstance(sentences, list) or not sentences:
            raise RequestError("'sentences' must be a non-empty list of token lists, e.g. [[\"The\", \"bank\"]]",
                               param="sentences")
        for i, sentence in enumerate(sentences):
            if not isinstance(sentence, list) or not all(isinstance(t, str) and t and not any(c.isspace() for c in t)
                                                         for t in sentence):
                raise RequestError(f"sentence {i} must be a list of tokens (non-empty strings without spaces), found "
                                   f"{str(sentence)[:60]!r}", param="sentences")
        _check_sizes(sentences, limits)
        encoding = _encoding(payload, "encoding")
        floats = sum(len(s) for s in sentences) * len(layers or range(shape.num_layers)) * shape.dim
        size = check_answer_size(floats, encoding, "encoding", limits)
        return cls(sentences, encoding, OutputSpec("all", layers), size)

    def answer(self, arrays: list[np.ndarray], layers: tuple[int, ...] | None, model: str) -> dict:
        """`arrays`: each sentence's chosen layers, (k, n, D) (the worker applied `output`)."""
        out = []
        for sentence, vectors in zip(self.sentences, arrays):
            item = {"tokens": sentence, "shape": list(vectors.shape)}
            if self.encoding == "base64":
                item["base64"] = encode(vectors, "base64")
            else:
                item["vectors"] = vectors.tolist()
            out.append(item)
        return {"model": model, "layers": list(layers) if layers else None, "embeddings": out}
