"""`elmo serve` as real processes: a worker killed under load is replaced (its batch answered 503 + Retry-After,
every request after the replacement 200 with the right vectors, none hanging); clients that time out are
dropped from the line before any work; a reader that stops is cut off by the send deadline; a model that
will not load is one line; a request still running after --drain-seconds is cut (503) and the server exits
in time; /health turns 503 after three failed replacement loads."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest
from conftest import model_flags, subprocess_env

pytest.importorskip("starlette", reason="the serve extra: pip install 'elmo-bilm[serve]'")
pytest.importorskip("prometheus_client", reason="the serve extra: pip install 'elmo-bilm[serve]'")
httpx = pytest.importorskip("httpx")

from elmo.embed.output_file import OutputSpec

LINES = ["The bank raised interest rates .", "We sat on the bank of the river .", "one", "Stocks fell sharply .",
         "A b c d e f g h", "Rates rose again today"]


# `elmo serve`, with every thread's stack printed on SIGUSR1 (what a failed test shows of a server that stalled)
STACKS_ON_USR1 = ("import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True); "
                  "from elmo.cli import main; sys.exit(main(sys.argv[1:]))")


class Server:
    """`elmo serve` started with `flags`; `url` once it listens."""

    def __init__(self, model_args: list[str], *flags: str):
        command = [sys.executable, "-c", STACKS_ON_USR1, "serve", *model_args, "--port", "0", *flags]
        # stderr (the access log, a line per request) into a file: a pipe nobody reads fills up, and a server
        # whose log cannot be written stops, as any program would
        self.log = tempfile.TemporaryFile("w+", encoding="utf-8")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                        env=subprocess_env())
        line = self.process.stdout.readline()
        assert "elmo serve:" in line, self.read_log()
        self.url = line.split(" at ")[1].split()[0].rstrip("/")

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=10, trust_env=False)

    def metric(self, name: str) -> float:
        match = re.search(rf"^{re.escape(name)} (\S+)$", self.get("/metrics").text, re.M)
        return float(match.group(1)) if match else 0.0

    def stop(self, stacks: bool = False) -> str:
        if stacks and self.process.poll() is None:
            self.process.send_signal(signal.SIGUSR1)
            time.sleep(1)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.read_log()

    def read_log(self) -> str:
        self.log.seek(0)
        return self.log.read()


def expected_vectors(embedder) -> dict[str, np.ndarray]:
    pooled = OutputSpec("average", None, pool="mean")
    return {line: pooled.apply(layers) for line, layers in
            zip(LINES, embedder.embed_sentences([line.split() for line in LINES], layers="all"))}


async def load_and_kill(server: Server, clients: int) -> tuple[list[dict], float, float]:
    """`clients` clients send back to back; after 150 answers the worker is SIGKILLed; once /ready is true
    again every client sends 3 more requests. Returns every request (sent, status, answer) and the times of
    the kill and of readiness."""
    records: list[dict] = []
    pid = server.get("/health").json()["worker_pids"][0]
    times = {"killed": None, "ready": None}
    stop = asyncio.Event()

    async def client(k: int, http: httpx.AsyncClient) -> None:
        after_ready, i = 0, k
        while not stop.is_set() and after_ready < 3:
            line = LINES[i % len(LINES)]
            i += 1
            sent = time.monotonic()
            response = await http.post("/v1/embeddings", json={"input": line}, timeout=120)
            records.append({"sent": sent, "line": line, "status": response.status_code, "response": response})
            if times["ready"] is not None and sent > times["ready"]:
                after_ready += 1

    async def killer(http: httpx.AsyncClient) -> None:
        while len(records) < 150:
            await asyncio.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        times["killed"] = time.monotonic()
        deadline = time.monotonic() + 120  # a shared test machine can make a load take long
        while (await http.get("/ready", timeout=60)).status_code != 200:
            assert time.monotonic() < deadline, "no replacement worker within 120 s"
            await asyncio.sleep(0.05)
        times["ready"] = time.monotonic()

    limits = httpx.Limits(max_connections=clients + 2)
    async with httpx.AsyncClient(base_url=server.url, limits=limits, trust_env=False) as http:
        kill = asyncio.create_task(killer(http))
        await asyncio.wait_for(asyncio.gather(*(client(k, http) for k in range(clients)), kill), 300)
    return records, times["killed"], times["ready"]


@pytest.mark.slow
def test_a_worker_killed_under_load_is_replaced_and_every_later_request_answers(model_args, embedder, one_thread):
    want = expected_vectors(embedder)
    server = Server(model_args)
    try:
        old_pid = server.get("/health").json()["worker_pids"][0]
        records, killed, ready = asyncio.run(load_and_kill(server, clients=64))
        health = server.get("/health").json()
    except BaseException:
        print(server.stop(stacks=True)[-20_000:])  # the server's side of the failure
        raise
    finally:
        log = server.stop()
    statuses = {r["status"] for r in records}
    assert statuses <= {200, 503}, statuses  # never a 500, every request answered (the gather's timeout: none hangs)
    lost = [r for r in records if r["status"] == 503]
    assert lost, "the kill hit no batch in flight"
    for r in lost:
        error = r["response"].json()["error"]
        assert error["code"] == "worker_restarting" and "died" in error["message"]
        assert int(r["response"].headers["retry-after"]) >= 1
    after = [r for r in records if r["sent"] > ready]
    assert len(after) >= 64 * 3 and all(r["status"] == 200 for r in after)
    for r in after + [r for r in records if r["status"] == 200]:
        got = np.array(r["response"].json()["data"][0]["embedding"], dtype=np.float32)
        np.testing.assert_allclose(got, want[r["line"]], atol=1e-5, rtol=0)
    assert health["worker_restarts"] == 1 and health["worker_deaths"] == 1 and health["workers_ready"] == 1
    assert health["worker_pids"][0] not in (None, old_pid) and health["status"] == "ok"
    assert "worker 0 died (exit code -9); starting a replacement" in log and "worker 0 replaced" in log
    assert "Traceback" not in log, log


async def time_out_clients(url: str, count: int, seconds: float) -> list[str]:
    """`count` clients that give up after `seconds` (httpx's timeout; the connection is closed)."""
    async with httpx.AsyncClient(base_url=url, timeout=seconds, trust_env=False) as http:
        posts = (http.post("/v1/embeddings", json={"input": f"word {k}"}) for k in range(count))
        results = await asyncio.gather(*posts, return_exceptions=True)
    return [type(r).__name__ for r in results]


@pytest.mark.slow
def test_clients_that_leave_are_dropped_and_a_stalled_reader_is_cut_off(model_args):
    """With --max-wait-ms 2000 a lone batch waits 2 s for company: 16 clients that give up after 0.5 s are
    gone before it starts; none of their work is done. Then a client that never reads a 16,384-token
    answer (float JSON, about 30 MB, far beyond the sockets' buffers) is cut off after --send-timeout 1 and
    the answer's bytes are given back."""
    server = Server(model_args, "--max-wait-ms", "2000", "--send-timeout", "1", "--no-access-log")
    try:
        assert asyncio.run(time_out_clients(server.url, 16, 0.5)) == ["ReadTimeout"] * 16
        time.sleep(2.5)
        assert server.metric('elmo_dropped_requests_total{when="waiting"}') == 16
        assert server.metric("elmo_tokens_total") == 0 and server.metric("elmo_batch_requests_count") == 0
        assert server.metric('elmo_requests_total{endpoint="/v1/embeddings",status="499"}') == 16
        for process in ("http", "worker-0"):  # process metrics of the HTTP process and of each worker
            assert server.metric(f'elmo_process_resident_bytes{{process="{process}"}}') > 10_000_000
            assert server.metric(f'elmo_process_cpu_seconds{{process="{process}"}}') > 0
        answer = httpx.post(server.url + "/v1/embeddings", json={"input": "still served"}, timeout=30, trust_env=False)
        assert answer.status_code == 200 and server.metric("elmo_tokens_total") == 2

        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect((host, int(port)))
        body = ('{"sentences": [' + ",".join(['["a","b","c","d","e","f","g","h"]'] * 2048) + "]}").encode()
        stalled.sendall(b"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n" % len(body) + body)
        deadline = time.monotonic() + 30
        while server.metric("elmo_send_timeouts_total") < 1:
            assert time.monotonic() < deadline, "the stalled reader was never cut off"
            time.sleep(0.2)
        assert server.metric("elmo_answer_bytes_held") == 0
        received = 0
        stalled.settimeout(5)
        try:
            while chunk := stalled.recv(1 << 20):
                received += len(chunk)
        except (ConnectionResetError, socket.timeout):
            pass
        stalled.close()
        assert 0 < received < 16_384 * 96 * 10  # what the buffers held, not the whole answer
        assert server.get("/ready").json()["ready"] is True
    finally:
        log = server.stop()
    assert "stopped reading its answer for 1 s; connection closed" in log


@pytest.mark.slow
def test_a_model_that_will_not_load_is_one_line(allennlp_dir, tmp_path):
    damaged = tmp_path / "weights.hdf5"
    damaged.write_bytes(b"\x89HDF\r\n\x1a\n" + os.urandom(4096))
    command = [sys.executable, "-m", "elmo", "serve", "--options", str(allennlp_dir / "options.json"),
               "--weights", str(damaged), "--port", "0"]
    done = subprocess.run(command, capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("elmo serve: error: the model could not be loaded: ") and \
        done.stderr.count("\n") == 1, done.stderr


def post_in_background(url: str, body: dict) -> tuple[threading.Thread, dict]:
    """A POST in a thread of its own; the dict gets its response or the exception that ended it."""
    outcome: dict = {}

    def send() -> None:
        try:
            outcome["response"] = httpx.post(url, json=body, timeout=60, trust_env=False)
        except httpx.HTTPError as e:
            outcome["error"] = e

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread, outcome


@pytest.mark.slow
def test_sigterm_cuts_a_request_still_running_after_drain_seconds(model_args):
    """A request whose worker is stopped (SIGSTOP: a worker that makes no progress, as under a stuck
    library call) is in flight when SIGTERM comes: the server waits --drain-seconds 1 for it, cuts it,
    answers it 503 ("server_stopping"), kills the busy worker and exits 0 within the drain and a small margin,
    saying what it cut in one line (no traceback)."""
    server = Server(model_args, "--drain-seconds", "1", "--no-access-log")
    try:
        pid = server.get("/health").json()["worker_pids"][0]
        os.kill(pid, signal.SIGSTOP)
        thread, outcome = post_in_background(server.url + "/v1/embeddings", {"input": "never answered"})
        deadline = time.monotonic() + 10
        while server.get("/health").json()["running_tokens"] == 0:  # the batch is at the stopped worker
            assert time.monotonic() < deadline, "the request never reached the worker"
            time.sleep(0.05)
        sent = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        code = server.process.wait(30)
        took = time.monotonic() - sent
        thread.join(10)
    finally:
        log = server.stop()
    assert code == 0 and 1.0 <= took < 1.0 + 3.0, (code, took, log)
    assert "Cancel 1 running task(s), timeout graceful shutdown exceeded" in log, log
    cut = outcome["response"]  # cut, and told so: a 503 to send again, not a 500 or a dropped connection
    assert cut.status_code == 503 and cut.json()["error"]["code"] == "server_stopping", cut.text
    assert cut.headers["retry-after"] == "1"
    with pytest.raises(ProcessLookupError):  # the stopped worker was killed, not left behind
        os.kill(pid, 0)
    assert "Traceback" not in log, log


FAILED_LOAD = "worker 0's replacement did not load: "


@pytest.mark.slow
def test_health_fails_after_three_failed_replacement_loads(tmp_path, allennlp_dir):
    """The model's weights damaged after start-up (as a disk or a careless deploy would), then the worker
    killed: every replacement fails to load; /ready is 503 throughout, /health 200 ("ok") through the first
    two failures and 503 ("failing") from the third."""
    for name in ("options.json", "lm_weights.hdf5"):
        shutil.copy(allennlp_dir / name, tmp_path / name)
    server = Server(model_flags(tmp_path), "--no-access-log")
    try:
        pid = server.get("/health").json()["worker_pids"][0]
        weights = tmp_path / "lm_weights.hdf5"
        weights.write_bytes(b"\x89HDF\r\n\x1a\n" + os.urandom(4096))
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while server.get("/ready").status_code != 503:  # the death seen
            assert time.monotonic() < deadline, "the killed worker was never noticed"
            time.sleep(0.02)
        seen = []  # (failures in the log before the probe, /health status and code, /ready code)
        deadline = time.monotonic() + 60  # three loads and the pauses of 1 and 2 s between them
        while True:
            failures = server.read_log().count(FAILED_LOAD)
            health = server.get("/health")
            seen.append((failures, health.json()["status"], health.status_code, server.get("/ready").status_code))
            if health.status_code == 503:
                break
            assert time.monotonic() < deadline, seen[-5:]
            time.sleep(0.05)
        health = health.json()
    finally:
        log = server.stop()
    assert all(ready == 503 for *_, ready in seen), seen  # no worker the whole time
    assert all(failures < 3 and status == "ok" and code == 200 for failures, status, code, _ in seen[:-1]), seen
    assert {failures for failures, *_ in seen} >= {1, 2}, seen  # /health was 200 after the first and second failure
    assert health["status"] == "failing" and health["workers_ready"] == 0 and health["worker_restarts"] == 0, health
    assert log.count(FAILED_LOAD) == 3, log  # 503 at the third failure, not later
    assert "Traceback" not in log, log
