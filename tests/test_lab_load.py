"""The lab under load, against a real server on 127.0.0.1: a full lab answers 503 with Retry-After,
work of a client that hangs up is dropped or stopped, slow headers are cut off, slow connections make
room for quick ones, and the Host check holds on a wildcard bind (#56 item 11).

A stand-in panel that waits for the test's signal keeps computations running as long as a test needs
(it checks for cancellation the way the model's layers do); no test asserts a duration.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest
from test_lab_support import fixture_files, need_module

from elmo.cli.lab import SIZES
from elmo.lab import LabModels, ReferenceSpec, build_reference
from elmo.lab.inputs import Limits

need_module("starlette")
need_module("uvicorn")
from elmo.lab import panels_tasks  # noqa: E402
from elmo.lab import server as lab_server  # noqa: E402
from elmo.lab.admission import WorkCancelled, _run_with_flag, check_cancelled  # noqa: E402
from elmo.lab.app import create_app  # noqa: E402
from elmo.lab.hosts import host_names  # noqa: E402
from elmo.lab.server import ServerLimits, make_server  # noqa: E402

PATIENCE = 60.0  # seconds to wait for a state the test expects: a hang fails, a slow machine does not


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    options, weights = fixture_files()
    models = LabModels.load(options=str(options), weights=str(weights))
    ref = build_reference(models.bilm, None, ReferenceSpec(*SIZES["small"]), tmp_path_factory.mktemp("ref"),
                          log=lambda m: None)
    return models, ref


class Gate:
    """A panel that computes nothing until released, checking for cancellation meanwhile."""

    def __init__(self):
        self.release = threading.Event()
        self.started = 0

    def __call__(self, lab, ref, payload, limits):
        self.started += 1
        while not self.release.wait(0.01):
            check_cancelled()
        return {"done": True}


class Server:
    """create_app + make_server on a free port, in a thread."""

    def __init__(self, app, limits: ServerLimits = ServerLimits()):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.server = make_server(app, limits)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started)

    def request(self, method: str, path: str, body: dict | None = None, host: str | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=PATIENCE)
        headers = {"Host": host or f"127.0.0.1:{self.port}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()

    def load(self) -> dict:
        return json.loads(self.request("GET", "/api/load")[2])

    def start_post(self, path: str) -> socket.socket:
        """Send a POST and leave its answer unread (the caller may hang up)."""
        body = b'{"sentence": "The cat sat ."}'
        s = socket.create_connection(("127.0.0.1", self.port), timeout=PATIENCE)
        s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        return s

    def close(self):
        self.server.should_exit = True
        self.thread.join(PATIENCE)


def wait_until(condition, what: str = "the expected state"):
    deadline = time.monotonic() + PATIENCE
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def read_answer(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
        if b"\r\n\r\n" in data and b'"done"' in data:
            break
    return data


@pytest.fixture
def gated(lab, monkeypatch):
    gate = Gate()
    monkeypatch.setattr(panels_tasks, "tag", gate)
    server = Server(create_app(*lab, Limits(max_running=1, max_waiting=1)))
    yield server, gate
    gate.release.set()
    server.close()


def test_a_full_lab_answers_503_with_retry_after_and_light_requests_still_pass(gated):
    server, gate = gated
    first = server.start_post("/api/tag")
    wait_until(lambda: server.load()["running"] == 1, "the first computation to run")
    second = server.start_post("/api/tag")
    wait_until(lambda: server.load()["waiting"] == 1, "the second to wait")
    status, headers, body = server.request("POST", "/api/tag", {"sentence": "The cat sat ."})
    assert status == 503 and int(headers["retry-after"]) >= 1
    assert "the lab is busy: 1 computations running and 1 waiting" in json.loads(body)["error"]
    assert server.request("GET", "/api/info")[0] == 200  # light requests are not admitted, never refused
    assert server.request("GET", "/")[0] == 200
    gate.release.set()
    assert b"200 OK" in read_answer(first) and b"200 OK" in read_answer(second)
    load = server.load()
    assert (load["served"], load["refused"], load["running"], load["waiting"]) == (2, 1, 0, 0)


def test_work_of_a_client_that_hangs_up_is_dropped_or_stopped(gated, lab):
    server, gate = gated
    running = server.start_post("/api/tag")
    wait_until(lambda: server.load()["running"] == 1, "the computation to run")
    waiting = server.start_post("/api/tag")
    wait_until(lambda: server.load()["waiting"] == 1, "the second to wait")
    waiting.close()  # hangs up while in line: its work never starts
    wait_until(lambda: server.load()["dropped_waiting"] == 1, "the waiting request to be dropped")
    running.close()  # hangs up while its work runs: stopped at the next check, its slot freed
    wait_until(lambda: server.load()["stopped_running"] == 1 and server.load()["running"] == 0, "the stop")
    assert gate.started == 1
    status, _, body = server.request("POST", "/api/directions", {"sentence": "The cat sat ."})
    assert status == 200 and json.loads(body)["available"] is False  # the real model runs again at once


def test_the_models_layers_stop_a_cancelled_computation(lab):
    """The check the server relies on: every module of the biLM checks the flag before its forward."""
    models, ref = lab
    create_app(models, ref)  # installs the checks
    stop, go = threading.Event(), threading.Event()
    stop.set()
    with pytest.raises(WorkCancelled):
        _run_with_flag(stop, lambda: models.embed([["The", "cat"]]))
    assert _run_with_flag(go, lambda: models.embed([["The", "cat"]]))[0].shape[1] == 2
    assert models.embed([["The", "cat"]])[0].shape[1] == 2  # outside a request nothing is checked


def test_slow_headers_are_cut_off_and_the_rest_served(lab):
    server = Server(create_app(*lab), ServerLimits(header_seconds=0.5, max_connections=64))
    try:
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=PATIENCE)
        slow.sendall(b"GET /api/info HTTP/1.1\r\nHo")  # and nothing more
        answer = slow.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408") and slow.recv(4096) == b""  # closed after the 408
        silent = socket.create_connection(("127.0.0.1", server.port), timeout=PATIENCE)
        assert silent.recv(4096) == b""  # connected, sent nothing: closed without a word
        assert server.request("GET", "/api/info")[0] == 200
    finally:
        server.close()


def test_at_the_connection_cap_the_slowest_connection_makes_room(lab, monkeypatch):
    server = Server(create_app(*lab), ServerLimits(header_seconds=600, max_connections=4))
    try:
        slow = []
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=PATIENCE)
            s.sendall(b"GET / HTTP/1.1\r\nX-Slow: 1")
            slow.append(s)
            time.sleep(0.05)  # an order of arrival, so that the first is the one evicted
        monkeypatch.setattr(lab_server, "EVICT_AFTER", 3600.0)  # none has waited long enough to be pushed out
        status, headers, body = server.request("GET", "/api/info")
        assert status == 503 and headers["retry-after"] == "1" and b"too many open connections" in body
        monkeypatch.setattr(lab_server, "EVICT_AFTER", 0.0)
        assert server.request("GET", "/api/info")[0] == 200  # the fifth connection got in
        assert slow[0].recv(4096) == b""  # the longest waiting was closed to make room
    finally:
        server.close()


@pytest.mark.parametrize("host, status", [
    ("attacker.rebind.example", 403), ("attacker.rebind.example:8765", 403), ("127.0.0.1.rebind.example", 403),
    ("lab.example.org", 200), ("LAB.example.org.:8765", 200), ("localhost:8765", 200),
    ("192.168.1.20:8765", 200), ("[fe80::1]:8765", 200),
])
def test_a_wildcard_bind_answers_only_addresses_and_named_hosts(lab, host, status):
    server = Server(create_app(*lab, allowed_hosts=host_names("0.0.0.0", ["lab.example.org"])))
    try:
        assert server.request("GET", "/api/info", host=host)[0] == status
        code, _, body = server.request("POST", "/api/directions", {"sentence": "The cat sat ."}, host=host)
        assert code == status
        if status == 403:
            assert "is not this lab" in json.loads(body)["error"] and "--allowed-host" in json.loads(body)["error"]
    finally:
        server.close()


def test_load_flags_are_checked_and_allowed_host_takes_names_not_patterns(capsys):
    from elmo.cli import main

    for bad in ("*", "lab.example:80", "http://lab.example"):
        assert main(["lab", "--host", "0.0.0.0", "--allowed-host", bad, "--no-browser"]) == 2
        assert "give one host name" in capsys.readouterr().err
    for flags, message in ((["--max-running", "0"], "expected a whole number >= 1"),
                           (["--max-waiting", "-1"], "expected a whole number >= 0"),
                           (["--max-connections", "x"], "expected a whole number >= 1")):
        with pytest.raises(SystemExit):
            main(["lab", *flags, "--no-browser"])
        assert message in capsys.readouterr().err
    assert main(["lab", "--header-timeout", "nan", "--no-browser"]) == 2
    assert "--header-timeout nan: must be above 0" in capsys.readouterr().err
    names = host_names("::", [])
    assert {"localhost", "127.0.0.1", "::1", socket.gethostname().lower()} <= names and "" not in names
