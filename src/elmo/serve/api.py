"""What the server's endpoints take and give: request checks that say what is wrong, and the answers.

`POST /v1/embeddings` follows OpenAI's embeddings API, so its clients work unchanged: `input` is a
string or a list of strings, each split on whitespace; `data[i].embedding` is the masked mean over the
string's tokens of the mean of the chosen layers (`elmo embed --average --pool mean`, with `--layers`),
as a list of floats or, with `"encoding_format": "base64"` (what OpenAI's Python client asks for),
base64 of little-endian float32. `POST /embed` takes token lists and gives each token's chosen layers.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..embed_file import OutputSpec
from ..lab.inputs import LabInputError

ENCODINGS = ("float", "base64")


@dataclass(frozen=True)
class ServeLimits:
    """One request's bounds and the line's; a request beyond them gets a 4xx naming the limit."""

    max_body_bytes: int = 4_000_000
    body_seconds: float = 10.0  # for a request body to arrive once its headers have
    max_request_tokens: int = 16_384  # tokens in one request, all its strings together
    max_inputs: int = 2048  # strings (or token lists) in one request, as OpenAI's API
    max_queue_tokens: int = 65_536  # tokens waiting for the model; more get 503 + Retry-After


def encode(vector: np.ndarray, encoding: str) -> list | str:
    if encoding == "base64":
        return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector.tolist()


def _encoding(payload: dict, key: str) -> str:
    value = payload.get(key, "float")
    if value not in ENCODINGS:
        raise LabInputError(f"'{key}' must be one of {', '.join(ENCODINGS)}, found {value!r}")
    return value


def _check_sizes(sentences: list[list[str]], limits: ServeLimits) -> None:
    if len(sentences) > limits.max_inputs:
        raise LabInputError(f"{len(sentences)} inputs in one request; this server takes at most {limits.max_inputs}",
                            413)
    tokens = sum(len(s) for s in sentences)
    if tokens > limits.max_request_tokens:
        raise LabInputError(f"{tokens} tokens in one request; this server takes at most {limits.max_request_tokens} "
                            "(split the request)", 413)


@dataclass(frozen=True)
class EmbeddingsRequest:
    """A checked `POST /v1/embeddings` body."""

    sentences: list[list[str]]
    encoding: str

    @classmethod
    def parse(cls, payload: dict[str, Any], limits: ServeLimits) -> EmbeddingsRequest:
        texts = payload.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            found = "nothing" if texts is None else f"{type(texts).__name__} {str(texts)[:40]!r}"
            raise LabInputError(f"'input' must be a string or a non-empty list of strings, found {found} (token id "
                                "lists are not taken: this model reads characters)")
        model = payload.get("model")
        if model is not None and not isinstance(model, str):
            raise LabInputError(f"'model' must be a string, found {type(model).__name__}")
        sentences = [t.split() for t in texts]
        _check_sizes(sentences, limits)
        return cls(sentences, _encoding(payload, "encoding_format"))

    def answer(self, arrays: list[np.ndarray], layers: tuple[int, ...] | None, model: str) -> dict:
        pooled = OutputSpec("average", layers, pool="mean")
        data = [{"object": "embedding", "index": i, "embedding": encode(pooled.apply(arr), self.encoding)}
                for i, arr in enumerate(arrays)]
        tokens = sum(len(s) for s in self.sentences)
        return {"object": "list", "data": data, "model": model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


@dataclass(frozen=True)
class EmbedRequest:
    """A checked `POST /embed` body: {"sentences": [[token, ...], ...], "encoding": "float"|"base64"}."""

    sentences: list[list[str]]
    encoding: str

    @classmethod
    def parse(cls, payload: dict[str, Any], limits: ServeLimits) -> EmbedRequest:
        sentences = payload.get("sentences")
        if not isinstance(sentences, list) or not sentences:
            raise LabInputError("'sentences' must be a non-empty list of token lists, e.g. [[\"The\", \"bank\"]]")
        for i, sentence in enumerate(sentences):
            if not isinstance(sentence, list) or not all(isinstance(t, str) and t and not any(c.isspace() for c in t)
                                                         for t in sentence):
                raise LabInputError(f"sentence {i} must be a list of tokens (non-empty strings without spaces), found "
                                    f"{str(sentence)[:60]!r}")
        _check_sizes(sentences, limits)
        return cls(sentences, _encoding(payload, "encoding"))

    def answer(self, arrays: list[np.ndarray], layers: tuple[int, ...] | None, model: str) -> dict:
        chosen = OutputSpec("all", layers)
        out = []
        for sentence, arr in zip(self.sentences, arrays):
            vectors = chosen.apply(arr)  # (k, n, D)
            item = {"tokens": sentence, "shape": list(vectors.shape)}
            if self.encoding == "base64":
                item["base64"] = encode(vectors, "base64")
            else:
                item["vectors"] = vectors.tolist()
            out.append(item)
        return {"model": model, "layers": list(layers) if layers else None, "embeddings": out}
