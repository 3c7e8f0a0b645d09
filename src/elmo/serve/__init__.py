"""`elmo serve`: an HTTP embedding service with dynamic batching (docs/serving.md).

`POST /v1/embeddings` in OpenAI's format, `POST /embed` for each token's layers, `GET /health`,
`GET /metrics` (Prometheus) and `GET /openapi.json`. Concurrent requests are batched (`batcher.py`),
every sentence from zero state. Needs the serve extra: `pip install "elmo-bilm[serve]"`.

May import: the package face, elmo_char_ids, elmo.embed, elmo.errors, elmo.files, elmo.formats, elmo.hub, elmo.lab,
elmo.model, elmo.models, elmo.tf.
"""


def create_app(*args, **kwargs):
    """See app.create_app; imported lazily so `import elmo.serve` needs no web framework."""
    from .app import create_app as make

    return make(*args, **kwargs)
