"""The server's OpenAPI 3.1 schema (`GET /openapi.json`), written out: what each endpoint takes and gives."""

from __future__ import annotations

from elmo import __version__

_ERROR = {"description": "JSON error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_VECTOR = {"oneOf": [{"type": "array", "items": {"type": "number"}},
                     {"type": "string", "description": "base64 of little-endian float32"}]}
_ENCODING = {"type": "string", "enum": ["float", "base64"], "default": "float"}


def _post(summary: str, request: str, response: str) -> dict:
    def body(name: str) -> dict:
        return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}
    return {"post": {"summary": summary, "requestBody": {"required": True, **body(request)},
                     "responses": {"200": {"description": "OK", **body(response)},
                                   **{code: _ERROR for code in ("400", "401", "403", "408", "413", "415")},
                                   "503": {**_ERROR, "headers": {"Retry-After": {"schema": {"type": "integer"}}}}}}}


SCHEMAS = {
    "EmbeddingsRequest": {"type": "object", "required": ["input"], "properties": {
        "input": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                  "description": "text split on whitespace into tokens"},
        "model": {"type": "string", "description": "accepted and ignored: the server runs one model"},
        "encoding_format": _ENCODING,
        "dimensions": {"type": "integer", "description": "the model's own dimension or left out (else 400)"}}},
    "EmbeddingsResponse": {"type": "object", "properties": {
        "object": {"const": "list"}, "model": {"type": "string"},
        "data": {"type": "array", "items": {"type": "object", "properties": {
            "object": {"const": "embedding"}, "index": {"type": "integer"}, "embedding": _VECTOR}}},
        "usage": {"type": "object", "properties": {"prompt_tokens": {"type": "integer"},
                                                   "total_tokens": {"type": "integer"}}}}},
    "EmbedRequest": {"type": "object", "required": ["sentences"], "properties": {
        "sentences": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
        "encoding": _ENCODING}},
    "EmbedResponse": {"type": "object", "properties": {
        "model": {"type": "string"}, "layers": {"type": ["array", "null"], "items": {"type": "integer"}},
        "embeddings": {"type": "array", "items": {"type": "object", "properties": {
            "tokens": {"type": "array", "items": {"type": "string"}},
            "shape": {"type": "array", "items": {"type": "integer"}, "description": "(layers, tokens, dim)"},
            "vectors": {"type": "array", "description": "nested lists of that shape (encoding float)"},
            "base64": {"type": "string", "description": "little-endian float32 in that shape (encoding base64)"}}}}}},
    "Error": {"type": "object", "properties": {"error": {"type": "object", "properties": {
        "message": {"type": "string"}, "type": {"type": "string"}, "param": {"type": ["string", "null"]},
        "code": {"type": ["string", "null"]}}}}},
    "ModelList": {"type": "object", "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": {
        "type": "object", "properties": {"id": {"type": "string"}, "object": {"const": "model"},
                                         "created": {"type": "integer"}, "owned_by": {"type": "string"}}}}}},
}


def openapi_schema(model_name: str) -> dict:
    return {
        "openapi": "3.1.0",
        "info": {"title": "elmo serve", "version": __version__,
                 "description": f"ELMo embeddings of the model {model_name!r}; every sentence from zero state. "
                 "With --api-key, every path but /health and /ready needs 'Authorization: Bearer KEY'."},
        "paths": {
            "/v1/embeddings": _post("One vector per input string (OpenAI's embeddings format)", "EmbeddingsRequest",
                                    "EmbeddingsResponse"),
            "/embed": _post("Each token's chosen layers", "EmbedRequest", "EmbedResponse"),
            "/v1/models": {"get": {"summary": "The model served (OpenAI's list format)", "responses": {"200": {
                "description": "OK", "content": {"application/json": {"schema": {
                    "$ref": "#/components/schemas/ModelList"}}}}, "401": _ERROR}}},
            "/health": {"get": {"summary": "Liveness: the model, the workers and the server's load (503 when "
                                "replacement workers keep failing to load)",
                                "responses": {"200": {"description": "OK"}, "503": {"description": "failing"}}}},
            "/ready": {"get": {"summary": "Readiness: 200 while a worker can take a batch, else 503",
                               "responses": {"200": {"description": "ready"}, "503": {"description": "not ready"}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "text"}}}},
        },
        "components": {"schemas": SCHEMAS},
    }
