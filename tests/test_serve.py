"""`elmo serve`: batched answers equal to `elmo embed` of the same lines, the endpoints' formats, the limits
(413, 415, 400, 503 + Retry-After, Host), the batcher's rules, and SIGTERM finishing what is in flight."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import socket
import subprocess
import sys
import threading

import h5py
import numpy as np
import pytest
from conftest import subprocess_env

pytest.importorskip("starlette", reason="the serve extra: pip install 'elmo-bilm[serve]'")
pytest.importorskip("prometheus_client", reason="the serve extra: pip install 'elmo-bilm[serve]'")
httpx = pytest.importorskip("httpx")

from elmo.cli import main  # noqa: E402
from elmo.serve.api import ServeLimits  # noqa: E402
from elmo.serve.app import create_app  # noqa: E402
from elmo.serve.batcher import Batcher  # noqa: E402

LINES = ["The bank raised interest rates .", "We sat on the bank of the river .", "", "one",
         "Stocks fell sharply on Monday after the central bank said it would keep rates high ."]


async def post_all(app, requests: list[tuple[str, dict]]) -> list[httpx.Response]:
    """Every request at once, as concurrent clients would send them."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await asyncio.gather(*(client.post(path, json=body) for path, body in requests))


def get(app, path: str, **kwargs) -> httpx.Response:
    async def one():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.get(path, **kwargs)
    return asyncio.run(one())


def elmo_embed(tmp_path, model_args, *flags) -> list[np.ndarray]:
    (tmp_path / "lines.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / f"out{len(list(tmp_path.iterdir()))}.hdf5"
    assert main(["embed", str(tmp_path / "lines.txt"), str(out), *model_args, *flags]) == 0
    with h5py.File(out, "r") as f:
        return [f[str(i)][()] for i in range(len(LINES))]


def batch_counts(app) -> tuple[float, float]:
    """(model calls, requests they ran) from the Prometheus text."""
    text = get(app, "/metrics").text
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line.startswith("elmo_batch_requests_")}
    return values["elmo_batch_requests_count"], values["elmo_batch_requests_sum"]


def test_batched_requests_equal_elmo_embed_of_the_same_lines(embedder, model_args, tmp_path, one_thread):
    """Each line its own request, all at once: one model call runs them all, and each answer is what
    `elmo embed` gives that line (the pooled vector and every token's layers)."""
    app = create_app(embedder, "fixture", max_wait_ms=500)
    responses = asyncio.run(post_all(app, [("/v1/embeddings", {"input": line}) for line in LINES]))
    assert batch_counts(app) == (1, len(LINES))
    pooled = elmo_embed(tmp_path, model_args, "--average", "--pool", "mean")
    for line, response, want in zip(LINES, responses, pooled):
        body = response.json()
        assert response.status_code == 200 and body["object"] == "list" and body["model"] == "fixture"
        assert body["usage"] == {"prompt_tokens": len(line.split()), "total_tokens": len(line.split())}
        np.testing.assert_allclose(np.array(body["data"][0]["embedding"]), want, atol=1e-6, rtol=0)
    responses = asyncio.run(post_all(app, [("/embed", {"sentences": [line.split()]}) for line in LINES]))
    assert batch_counts(app) == (2, 2 * len(LINES))
    for response, want in zip(responses, elmo_embed(tmp_path, model_args, "--all")):
        item = response.json()["embeddings"][0]
        assert item["shape"] == list(want.shape)
        np.testing.assert_allclose(np.array(item["vectors"], dtype=np.float32).reshape(want.shape), want, atol=1e-6)


def test_layers_and_base64(embedder, model_args, tmp_path, one_thread):
    app = create_app(embedder, "fixture", layers=(1, 2))
    texts = LINES[:2]
    (as_float, as_base64) = asyncio.run(post_all(app, [
        ("/v1/embeddings", {"input": texts, "model": "anything"}),
        ("/v1/embeddings", {"input": texts, "encoding_format": "base64"})]))
    want = elmo_embed(tmp_path, model_args, "--average", "--layers", "1,2", "--pool", "mean")
    for i, item in enumerate(as_base64.json()["data"]):
        decoded = np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4")
        np.testing.assert_array_equal(decoded, np.array(as_float.json()["data"][i]["embedding"], dtype=np.float32))
        np.testing.assert_allclose(decoded, want[i], atol=1e-6, rtol=0)
    (tokens,) = asyncio.run(post_all(app, [("/embed", {"sentences": [LINES[0].split()], "encoding": "base64"})]))
    item = tokens.json()["embeddings"][0]
    assert tokens.json()["layers"] == [1, 2] and item["shape"] == [2, 6, embedder.bilm.output_dim()]
    layers = elmo_embed(tmp_path, model_args, "--all", "--layers", "1,2")[0]
    np.testing.assert_allclose(np.frombuffer(base64.b64decode(item["base64"]), "<f4").reshape(item["shape"]), layers,
                               atol=1e-6)


@pytest.mark.parametrize(("path", "body", "status", "message"), [
    ("/v1/embeddings", {"input": []}, 400, "'input' must be a string or a non-empty list of strings"),
    ("/v1/embeddings", {"input": [[1, 2]]}, 400, "token id lists are not taken"),
    ("/v1/embeddings", {"input": "a", "encoding_format": "int8"}, 400, "'encoding_format' must be one of"),
    ("/v1/embeddings", {"input": "word " * 41}, 413, "41 tokens in one request; this server takes at most 40"),
    ("/v1/embeddings", {"input": ["a"] * 5}, 413, "5 inputs in one request; this server takes at most 4"),
    ("/embed", {"sentences": [["two words"]]}, 400, "sentence 0 must be a list of tokens"),
    ("/embed", {"sentences": "The bank"}, 400, "'sentences' must be a non-empty list of token lists"),
    ("/embed", {"sentences": [["x"] * 30] * 2}, 413, "this server takes at most 256"),
])
def test_bad_requests_get_one_clear_error(embedder, path, body, status, message):
    limits = ServeLimits(max_body_bytes=256, max_request_tokens=40, max_inputs=4)
    app = create_app(embedder, "fixture", limits=limits)
    (response,) = asyncio.run(post_all(app, [(path, body)]))
    assert response.status_code == status and message in response.json()["error"]["message"], response.text


def test_not_json_and_unknown_paths(embedder):
    app = create_app(embedder, "fixture")

    async def send():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return (await client.post("/embed", content=b"sentences", headers={"content-type": "text/plain"}),
                    await client.get("/v2/nothing"))
    text, missing = asyncio.run(send())
    assert text.status_code == 415 and "must be sent as application/json" in text.json()["error"]["message"]
    assert missing.status_code == 404 and "GET /v2/nothing" in missing.json()["error"]["message"]


def test_a_full_line_gets_503_with_retry_after(embedder):
    """The model is held busy; the line takes 8 tokens; a request that would overflow it is refused at once."""
    release = threading.Event()

    def slow(sentences):
        release.wait(10)
        return [np.zeros((3, len(s), 4), np.float32) for s in sentences]

    limits = ServeLimits(max_queue_tokens=8)
    app = create_app(embedder, "fixture", limits=limits, batcher=Batcher(slow, 1, 0, 1, limits.max_queue_tokens))

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            first = asyncio.create_task(client.post("/embed", json={"sentences": [["a"] * 5]}))  # running
            await asyncio.sleep(0.2)
            second = asyncio.create_task(client.post("/embed", json={"sentences": [["b"] * 6]}))  # waiting
            await asyncio.sleep(0.2)
            refused = await client.post("/embed", json={"sentences": [["c"] * 3]})
            health = (await client.get("/health")).json()
            release.set()
            return refused, health, await first, await second

    refused, health, first, second = asyncio.run(scenario())
    assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1
    assert "6 tokens are waiting, at most 8 may" in refused.json()["error"]["message"]
    assert health["queued_tokens"] == 6 and health["running_tokens"] == 5
    assert first.status_code == second.status_code == 200


def test_host_check_and_the_health_metrics_and_schema(embedder):
    app = create_app(embedder, "fixture", allowed_hosts={"127.0.0.1", "localhost", "embed.example.org"})
    assert get(app, "/health", headers={"host": "rebound.example.com"}).status_code == 403
    health = get(app, "/health", headers={"host": "embed.example.org"}).json()
    assert health["status"] == "ok" and health["dim"] == embedder.bilm.output_dim() and health["num_layers"] == 3
    asyncio.run(post_all(app, [("/v1/embeddings", {"input": "a b c"}), ("/embed", {"sentences": [["x"]]})]))
    text = get(app, "/metrics").text
    for name in ("elmo_requests_total", "elmo_tokens_total", "elmo_batch_sentences_bucket", "elmo_queue_seconds_bucket",
                 "elmo_request_seconds_bucket", "elmo_model_seconds_count", "elmo_queued_tokens"):
        assert name in text
    assert 'elmo_requests_total{endpoint="/v1/embeddings",status="200"} 1.0' in text
    assert 'elmo_tokens_total 4.0' in text
    schema = get(app, "/openapi.json").json()
    assert schema["openapi"].startswith("3.") and {"/v1/embeddings", "/embed", "/health", "/metrics"} <= set(schema["paths"])


def test_batcher_rules():
    """One request per call with max_batch_tokens=1; a batch never splits a request nor exceeds the limit
    unless one request alone does; a request whose client left is skipped."""
    calls: list[list[int]] = []

    def record(sentences):
        calls.append([len(s) for s in sentences])
        return [np.zeros((1, len(s), 1), np.float32) for s in sentences]

    async def run(batcher, sizes, cancel=None):
        tasks = [asyncio.create_task(batcher.submit([["w"] * n])) for n in sizes]
        if cancel is not None:
            await asyncio.sleep(0)
            tasks[cancel].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        batcher.close()
        return results

    asyncio.run(run(Batcher(record, max_batch_tokens=1, max_wait_ms=50), [2, 3, 4]))
    assert calls == [[2], [3], [4]]
    calls.clear()
    results = asyncio.run(run(Batcher(record, max_batch_tokens=6, max_wait_ms=50), [2, 3, 9, 1, 4]))
    assert calls == [[2, 3], [9], [1, 4]] and [r[0].shape[1] for r in results] == [2, 3, 9, 1, 4]
    calls.clear()
    results = asyncio.run(run(Batcher(record, max_batch_tokens=100, max_wait_ms=50), [2, 3, 4], cancel=1))
    assert calls == [[2, 4]] and isinstance(results[1], asyncio.CancelledError)


@pytest.mark.slow
def test_sigterm_finishes_the_request_in_flight(model_args, tmp_path):
    """A request waits in a batch (--max-wait-ms 3000) when SIGTERM comes: it is answered, then the server exits.
    Meanwhile a client whose headers stop short is cut off with a 408 after --header-timeout."""
    command = [sys.executable, "-m", "elmo", "serve", *model_args, "--port", "0", "--max-wait-ms", "3000",
               "--header-timeout", "1"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())
    try:
        line = server.stdout.readline()
        assert "elmo serve:" in line, server.stderr.read()
        url = line.split(" at ")[1].split()[0].rstrip("/")
        answers = []
        client = threading.Thread(target=lambda: answers.append(
            httpx.post(url + "/v1/embeddings", json={"input": "The bank"}, timeout=30, trust_env=False)))
        client.start()
        host, port = url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as slow:  # headers that never finish
            slow.sendall(b"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            assert slow.recv(100).startswith(b"HTTP/1.1 408")  # after --header-timeout 1
        server.send_signal(signal.SIGTERM)
        client.join(30)
        assert answers and answers[0].status_code == 200 and answers[0].json()["data"][0]["embedding"]
        assert server.wait(30) == 0  # the command ends normally, its worker processes shut down
    finally:
        if server.poll() is None:
            os.kill(server.pid, signal.SIGKILL)
            server.wait()


def test_cli_refusals(capsys, model_args):
    assert main(["serve", *model_args, "--layers", "1,7", "--port", "0"]) == 2
    assert "layers" in capsys.readouterr().err
    assert main(["serve", *model_args, "--max-queue-tokens", "10", "--max-request-tokens", "20"]) == 2
    assert "--max-queue-tokens 10 is below --max-request-tokens 20" in capsys.readouterr().err
    assert main(["serve", *model_args, "--max-wait-ms", "-1"]) == 2
    assert "--max-wait-ms -1" in capsys.readouterr().err


def test_the_load_benchmark_table_puts_batched_beside_one_per_call():
    from conftest import load_script

    bench = load_script("benchmarks/serve_load.py")
    row = {"shape": "bundled", "concurrency": 64, "requests": 100, "failures": 0, "seconds": 10.0, "tokens_per_s": 250.0,
           "p50_s": 0.5, "p99_s": 0.9, "client_cpu_s": 1.0, "server_peak_rss_mb": 800.0}
    table = bench.markdown_table({"rows": [{**row, "mode": "one per call", "requests_per_s": 10.0},
                                           {**row, "mode": "batched", "requests_per_s": 35.0}]})
    assert "| bundled | 64 | batched | 35.0 | 250 | **x3.50** | 500 | 900 | 0 | 800 | 1.0 / 10.0 |" in table
