"""`elmo serve`'s API beside the embeddings: /v1/models, the API key, request ids, the access log, /ready,
OpenAI's error shape for every refusal, `dimensions`, the bounds on an answer's size, the counts by status,
process metrics, pooling in the worker, and the command's refusals of its flags (control characters,
--workers beyond the CPUs, a key on the command line). In-process (ASGI), no server started."""

from __future__ import annotations

import asyncio
import json
import logging

import numpy as np
import pytest

pytest.importorskip("starlette", reason="the serve extra: pip install 'elmo-bilm[serve]'")
pytest.importorskip("prometheus_client", reason="the serve extra: pip install 'elmo-bilm[serve]'")
httpx = pytest.importorskip("httpx")

from elmo.cli import build_parser, main  # noqa: E402
from elmo.cli.serve import api_keys, served_name, warn_if_open  # noqa: E402
from elmo.embed.output_file import OutputSpec
from elmo.serve import worker  # noqa: E402
from elmo.serve.api import ServeLimits  # noqa: E402
from elmo.serve.app import create_app  # noqa: E402
from elmo.serve.middleware import key_matches  # noqa: E402

KEY = "sk-test-0123456789abcdef"


def call(app, method: str, path: str, **kwargs) -> httpx.Response:
    async def one():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.request(method, path, **kwargs)
    return asyncio.run(one())


def assert_openai_error(response: httpx.Response, status: int, *words: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and isinstance(error["message"], str)
    for word in words:
        assert word in error["message"], error["message"]
    return error


def test_models_list_in_openai_format(embedder):
    app = create_app(embedder, "fixture")
    listing = call(app, "GET", "/v1/models").json()
    assert listing["object"] == "list" and len(listing["data"]) == 1
    card = listing["data"][0]
    assert card["id"] == "fixture" and card["object"] == "model" and card["owned_by"] == "elmo"
    assert isinstance(card["created"], int)
    assert call(app, "GET", "/v1/models/fixture").json() == card
    error = assert_openai_error(call(app, "GET", "/v1/models/gpt-4"), 404, "'gpt-4' is not served here")
    assert error["code"] == "model_not_found"


def test_api_key_bearer_401_in_openai_shape_and_open_probes(embedder):
    app = create_app(embedder, "fixture", api_keys=[b"other-key-1", KEY.encode()])
    body = {"input": "The bank"}
    missing = call(app, "POST", "/v1/embeddings", json=body)
    error = assert_openai_error(missing, 401, "no API key was given", "Authorization: Bearer")
    assert error["code"] == "invalid_api_key" and missing.headers["www-authenticate"] == "Bearer"
    wrong = call(app, "POST", "/v1/embeddings", json=body, headers={"authorization": "Bearer " + KEY[:-1]})
    assert_openai_error(wrong, 401, "not this server's")
    assert call(app, "GET", "/v1/models", headers={"authorization": "Basic " + KEY}).status_code == 401
    assert call(app, "GET", "/metrics").status_code == 401
    ok = call(app, "POST", "/v1/embeddings", json=body, headers={"authorization": "Bearer " + KEY})
    assert ok.status_code == 200 and len(ok.json()["data"][0]["embedding"]) == embedder.bilm.output_dim()
    assert call(app, "GET", "/health").status_code == 200 and call(app, "GET", "/ready").json()["ready"] is True
    assert key_matches(KEY, [b"a", KEY.encode()]) and not key_matches("", [b"a"]) and not key_matches(KEY, [])


def test_request_ids_and_one_access_log_line_per_request_without_bodies(embedder, caplog):
    app = create_app(embedder, "fixture")
    secret_text = "confidential merger plans"
    with caplog.at_level(logging.INFO, logger="elmo.serve.access"):
        echoed = call(app, "POST", "/v1/embeddings", json={"input": secret_text}, headers={"x-request-id": "abc-123"})
        made = call(app, "GET", "/health")
        odd = call(app, "GET", "/nowhere", headers={"x-request-id": "two words\x7f"})
    assert echoed.headers["x-request-id"] == "abc-123"
    assert len(made.headers["x-request-id"]) == 32 and odd.headers["x-request-id"] not in ("", "two words\x7f")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "elmo.serve.access"]
    assert len(lines) == 3
    assert lines[0]["request_id"] == "abc-123" and lines[0]["status"] == 200 and lines[0]["tokens"] == 3
    assert lines[0]["method"] == "POST" and lines[0]["path"] == "/v1/embeddings" and lines[0]["bytes"] > 0
    assert lines[2]["status"] == 404 and lines[2]["request_id"] == odd.headers["x-request-id"]
    assert all(secret_text not in r.getMessage() for r in caplog.records)


def test_dimensions_other_than_the_models_is_400(embedder):
    app = create_app(embedder, "fixture")
    dim = embedder.bilm.output_dim()
    for wanted in (256, dim + 1, True, "32"):
        error = assert_openai_error(call(app, "POST", "/v1/embeddings", json={"input": "a b", "dimensions": wanted}),
                                    400, f"this model's vectors have {dim} dimensions")
        assert error["param"] == "dimensions"
    same = call(app, "POST", "/v1/embeddings", json={"input": "a b", "dimensions": dim})
    assert same.status_code == 200 and len(same.json()["data"][0]["embedding"]) == dim


def test_every_refusal_has_openai_error_shape_and_is_counted(embedder):
    app = create_app(embedder, "fixture", limits=ServeLimits(max_body_bytes=256))
    assert_openai_error(call(app, "GET", "/health", headers={"host": "rebound.example.com"}), 403, "is not this server")
    assert_openai_error(call(app, "GET", "/nowhere"), 404, "GET /nowhere")
    assert_openai_error(call(app, "GET", "/v1/embeddings"), 405)
    assert_openai_error(call(app, "POST", "/embed", content=b"x", headers={"content-type": "text/plain"}), 415)
    assert_openai_error(call(app, "POST", "/embed", json={"sentences": [["x"] * 200]}), 413, "at most 256")
    assert_openai_error(call(app, "POST", "/embed", json={"sentences": "x"}), 400, "'sentences' must be")
    text = call(app, "GET", "/metrics").text
    for endpoint, status in (("/health", 403), ("other", 404), ("/v1/embeddings", 405), ("/embed", 415),
                             ("/embed", 413), ("/embed", 400)):
        assert f'elmo_requests_total{{endpoint="{endpoint}",status="{status}"}} 1.0' in text, (endpoint, status)


def test_answers_are_bounded_before_any_work(embedder):
    """A JSON-float answer over the float limit is 413 naming base64; the same in base64 is answered; an answer
    over the byte budget alone is 413; while the admitted answers hold the budget, 503 + Retry-After."""
    dim = embedder.bilm.output_dim()
    limits = ServeLimits(max_answer_floats=3 * 10 * dim - 1, max_answer_bytes=200_000)
    app = create_app(embedder, "fixture", limits=limits)
    sentence = [["w"] * 10]
    error = assert_openai_error(call(app, "POST", "/embed", json={"sentences": sentence}), 413,
                                f"{3 * 10 * dim:,} numbers as JSON text", "\"encoding\": \"base64\"", "fewer tokens")
    assert error["code"] == "answer_too_large" and error["param"] == "encoding"
    fine = call(app, "POST", "/embed", json={"sentences": sentence, "encoding": "base64"})
    assert fine.status_code == 200 and fine.json()["embeddings"][0]["shape"] == [3, 10, dim]
    assert_openai_error(call(app, "POST", "/embed", json={"sentences": [["w"] * 2000], "encoding": "base64"}), 413,
                        "MiB of answers at once", "fewer tokens")
    app.state.budget.take(199_000)  # answers already admitted, not yet sent
    busy = call(app, "POST", "/embed", json={"sentences": sentence, "encoding": "base64"})
    assert_openai_error(busy, 503, "answers of", "try again in")
    assert int(busy.headers["retry-after"]) >= 1
    app.state.budget.give_back(199_000)
    assert call(app, "POST", "/embed", json={"sentences": sentence, "encoding": "base64"}).status_code == 200
    assert app.state.budget.held == 0  # every answer's bytes given back once sent


def test_health_ready_and_process_metrics(embedder):
    app = create_app(embedder, "fixture")
    health = call(app, "GET", "/health").json()
    assert health["status"] == "ok" and health["model"] == "fixture" and health["workers_ready"] == 1
    assert call(app, "GET", "/ready").json() == {"ready": True, "model": "fixture", "workers_ready": 1, "workers": 1,
                                                 "worker_pids": [], "worker_restarts": 0, "worker_deaths": 0}
    text = call(app, "GET", "/metrics").text
    for name in ('elmo_process_resident_bytes{process="http"}', 'elmo_process_cpu_seconds{process="http"}',
                 'elmo_process_open_fds{process="http"}', "elmo_dropped_requests_total{when=\"waiting\"} 0.0",
                 "elmo_send_timeouts_total 0.0", "elmo_workers_ready 1.0", "elmo_worker_restarts_total 0.0",
                 "elmo_answer_bytes_held 0.0"):
        assert name in text, name


def test_the_worker_pools_and_sends_back_only_what_the_answer_needs(embedder, monkeypatch, one_thread):
    monkeypatch.setattr(worker, "_embedder", embedder)
    sentences = [["The", "bank", "rose"], ["A", "river"]]
    pooled, layers = worker.compute(sentences, [OutputSpec("average", None, pool="mean"), OutputSpec("all", (1, 2))])
    full = list(embedder.embed_sentences(sentences, layers="all"))
    assert pooled.shape == (embedder.bilm.output_dim(),) and layers.shape == (2, 2, embedder.bilm.output_dim())
    np.testing.assert_allclose(pooled, full[0].mean(0).mean(0), atol=1e-6)
    np.testing.assert_allclose(layers, full[1][1:], atol=1e-6)


def parse(*argv: str):
    return build_parser().parse_args(["serve", *argv])


def test_answers_name_the_model_never_a_path(tmp_path, allennlp_dir):
    assert served_name(parse("--model", str(allennlp_dir))) == allennlp_dir.name
    assert served_name(parse("--options", str(allennlp_dir / "options.json"), "--weights",
                             str(allennlp_dir / "lm_weights.hdf5"))) == allennlp_dir.name
    assert served_name(parse("--model", "https://example.org/a/b/elmo_small.tar.gz?token=x")) == "elmo_small"
    assert served_name(parse("--model", "original")) == "original"
    assert served_name(parse()) == "default"
    assert served_name(parse("--model", str(allennlp_dir), "--name", "prod-elmo")) == "prod-elmo"


@pytest.mark.parametrize(("argv", "words"), [
    (["--host", "127.0.0.1\x00"], ["--host '127.0.0.1\\x00'", "control character \\x00"]),
    (["--allowed-host", "a\x1b[31m"], ["--allowed-host", "\\x1b"]),
    (["--model", "mod\nel"], ["--model", "\\x0a"]),
    (["--name", "x\ty"], ["--name", "\\x09"]),
    (["--workers", "100000"], ["--workers 100000: this process may use", "at most"]),
    (["--threads", "4096"], ["--threads 4096: this process may use"]),
    (["--api-key", KEY], ["--api-key: give env:VAR", "not the key itself"]),
    (["--api-key", "env:ELMO_TEST_NO_SUCH_VARIABLE"], ["environment variable ELMO_TEST_NO_SUCH_VARIABLE holds no key"]),
    (["--send-timeout", "0"], ["--send-timeout 0: must be above 0"]),
    (["--drain-seconds", "-1"], ["--drain-seconds -1: must be above 0"]),
])
def test_flag_refusals_are_one_line_naming_the_flag(capsys, model_args, argv, words):
    assert main(["serve", *model_args, *argv, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("elmo serve: error: ") and "Traceback" not in err, err
    for word in words:
        assert word in err, err


def test_api_keys_from_a_file_or_the_environment_and_the_open_host_warning(tmp_path, monkeypatch, capsys):
    keys = tmp_path / "keys"
    keys.write_text("# rotated 2026-12-07\nkey-one\n\n  key-two  \n")
    assert api_keys(f"file:{keys}") == (b"key-one", b"key-two")
    monkeypatch.setenv("ELMO_TEST_KEYS", "a1,b2")
    assert api_keys("env:ELMO_TEST_KEYS") == (b"a1", b"b2") and api_keys(None) == ()
    warn_if_open("0.0.0.0", ())
    assert "warning: --host 0.0.0.0 without --api-key" in capsys.readouterr().err
    warn_if_open("0.0.0.0", (b"k",))
    warn_if_open("127.0.0.1", ())
    warn_if_open("::1", ())
    assert capsys.readouterr().err == ""
