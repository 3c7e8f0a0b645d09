"""Load on `elmo lab` (#56 item 11): light clients, the largest requests, clients that hang up, slowloris.

    python benchmarks/lab_load.py [--model default] [--light 200] [--heavy 100] [--hangup 20]
                                  [--slow 1100] [--slow-seconds 30] [--nofile 1024] [-- LAB FLAGS...]

Starts `elmo lab --no-browser --port 0 --reference-size small` (flags after `--` go to it) with its
open-file limit set to --nofile, then runs, one after the other:
- light: N concurrent clients, each GET /, /api/info and /static/main.js (3N requests);
- heavy: N concurrent POST /api/contextual of the largest size the lab takes (8 sentences of 60 tokens
  and a 1,200-character paragraph read before each);
- hangup: N clients send that request and hang up at once; then one light and one heavy request;
- slowloris: S connections that send a header byte every 2 s (each reopened --reconnect-after s after
  the lab closes it) for --slow-seconds, while 20 clients keep asking GET /api/info.
Prints one JSON line per scenario: requests, answers by status, errors, p50/p95 seconds, the lab's
RSS before, at its peak and after (after: once /api/load shows it idle, plus 2 s), its counts from /api/load, and
for slowloris the most file descriptors it held and whether its log says "Too many open files".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LARGE_TEXT = " ".join(["the", "old", "bank", "stood", "by", "a", "river", "near", "market", "streets"] * 6)
PARAGRAPH = " ".join([" ".join(["people", "walked", "along", "water", "and", "spoke", "of", "money"] * 6) + " ."] * 5)
LARGEST = {"word": "bank", "layer": 2, "paragraph": PARAGRAPH[:1200],
           "sentences": [{"sense": f"s{k % 2}", "text": LARGE_TEXT} for k in range(8)]}


async def http(port: int, method: str, path: str, body: dict | None = None, timeout: float = 600.0) -> dict:
    """One request on its own connection: {"status": int or "error:Name", "seconds": float}."""
    started = time.monotonic()
    data = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
        writer.write(head.encode() + b"\r\n" + data)
        answer = await asyncio.wait_for(reader.read(), timeout)
        writer.close()
        status: int | str = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else "error:empty"
    except (OSError, asyncio.TimeoutError, IndexError, ValueError) as e:
        status = f"error:{type(e).__name__}"
    return {"status": status, "seconds": time.monotonic() - started}


def summary(results: list[dict]) -> dict:
    seconds = sorted(r["seconds"] for r in results if isinstance(r["status"], int) and r["status"] < 400)
    statuses: dict[str, int] = {}
    for r in results:
        statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
    pick = (lambda q: round(seconds[min(len(seconds) - 1, int(q * len(seconds)))], 3)) if seconds else (lambda q: None)
    return {"requests": len(results), "statuses": statuses,
            "errors": sum(n for s, n in statuses.items() if s.startswith("error")),
            "refused_503": statuses.get("503", 0), "p50_s": pick(0.5), "p95_s": pick(0.95),
            "mean_s": round(statistics.fmean(seconds), 3) if seconds else None}


class Lab:
    """The `elmo lab` process under test."""

    def __init__(self, lab_args: list[str], nofile: int, log: Path):
        def limit_files():
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

        self.log_path = log
        elmo = Path(sys.executable).with_name("elmo")
        command = [str(elmo) if elmo.exists() else "elmo", "lab", "--no-browser", "--port", "0",
                   "--reference-size", "small", *lab_args]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
                                     preexec_fn=limit_files)
        line = self.proc.stdout.readline()
        if " at http://" not in line:
            raise SystemExit(f"elmo lab did not start: {line!r}; its log: {log.read_text()[-2000:]}")
        self.port = int(line.split(" at http://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return round(int(status.split("VmRSS:")[1].split()[0]) / 1024, 1)

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    async def load(self) -> dict:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(f"GET /api/load HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nConnection: close\r\n\r\n".encode())
        answer = await reader.read()
        writer.close()
        return json.loads(answer.split(b"\r\n\r\n", 1)[1])

    async def idle(self) -> dict:
        """Wait until no computation runs or waits, then 2 s for memory to be handed back."""
        while (load := await self.load())["running"] or load["waiting"]:
            await asyncio.sleep(0.2)
        await asyncio.sleep(2.0)
        return await self.load()

    def stop(self) -> str:
        self.proc.terminate()
        self.proc.wait(30)
        return self.log_path.read_text(errors="replace")


async def scenario(lab: Lab, name: str, requests) -> dict:
    """Run the coroutines in `requests` at once; the summary with RSS before/peak/after and the lab's counts."""
    before, peak, done = lab.rss_mb(), [0.0], asyncio.Event()

    async def sample():
        while not done.is_set():
            peak[0] = max(peak[0], lab.rss_mb())
            await asyncio.sleep(0.2)

    sampler = asyncio.ensure_future(sample())
    results = await asyncio.gather(*requests)
    done.set()
    await sampler
    counts = await lab.idle()
    return {"scenario": name, **summary(list(results)), "rss_before_mb": before, "rss_peak_mb": peak[0],
            "rss_after_mb": lab.rss_mb(), "lab_counts": counts}


def light_requests(lab: Lab, clients: int) -> list:
    async def client():
        return [await http(lab.port, "GET", p) for p in ("/", "/api/info", "/static/main.js")]
    return [client() for _ in range(clients)]


async def run_light(lab: Lab, clients: int) -> dict:
    before = lab.rss_mb()
    results = [r for rs in await asyncio.gather(*light_requests(lab, clients)) for r in rs]
    return {"scenario": f"light: {clients} concurrent clients x 3 GETs", **summary(results), "rss_before_mb": before,
            "rss_after_mb": lab.rss_mb()}


async def hang_up(port: int) -> dict:
    data = json.dumps(LARGEST).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST /api/contextual HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    await writer.drain()
    await asyncio.sleep(0.5)  # the lab has read the request and admitted it
    writer.close()
    return {"status": "hung up", "seconds": 0.0}


async def run_hangup(lab: Lab, clients: int) -> dict:
    result = await scenario(lab, f"hangup: {clients} largest requests, each client gone after 0.5 s",
                            [hang_up(lab.port) for _ in range(clients)])
    light = await http(lab.port, "GET", "/api/info")
    heavy = await http(lab.port, "POST", "/api/contextual", LARGEST)
    return {**result, "then_light": light, "then_heavy": heavy}


async def slow_client(port: int, until: float, tally: dict, reconnect_after: float) -> None:
    """Keep one connection sending its headers a byte every 2 s; reopen it `reconnect_after` s after the
    lab closes it (slowloris replaces its dead sockets once per round; 0: at once, a connection flood)."""
    header = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 200
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            tally["connect_failed"] += 1
            await asyncio.sleep(1.0)
            continue
        tally["opened"] += 1
        for byte in header:
            try:
                writer.write(bytes([byte]))
                answer = await asyncio.wait_for(reader.read(200), 2.0)
            except asyncio.TimeoutError:
                if time.monotonic() < until:
                    continue
                break
            except OSError:  # reset: the lab closed it with our byte unread
                answer = b""
            tally["closed_by_lab" if not answer.startswith(b"HTTP/1.1 503") else "refused_503"] += 1
            break
        writer.close()
        await asyncio.sleep(reconnect_after)


async def run_slowloris(lab: Lab, slow: int, seconds: float, reconnect_after: float) -> dict:
    tally = {"opened": 0, "closed_by_lab": 0, "refused_503": 0, "connect_failed": 0}
    until = time.monotonic() + seconds
    peak_files = [lab.open_files()]

    async def watch():
        while time.monotonic() < until:
            peak_files.append(lab.open_files())
            await asyncio.sleep(0.5)

    async def normal_client():
        results = []
        await asyncio.sleep(3.0)  # once the slow connections are open
        while time.monotonic() < until:
            results.append(await http(lab.port, "GET", "/api/info", timeout=30.0))
            await asyncio.sleep(0.2)
        return results

    before = lab.rss_mb()
    gathered = await asyncio.gather(watch(), *[normal_client() for _ in range(20)],
                                    *[slow_client(lab.port, until, tally, reconnect_after) for _ in range(slow)])
    results = [r for rs in gathered[1:21] for r in rs]
    return {"scenario": f"slowloris: {slow} slow connections (reopened {reconnect_after:g} s after a close) for "
            f"{seconds:g} s + 20 clients asking GET /api/info",
            **summary(results), "slow_connections": tally, "lab_peak_open_files": max(peak_files),
            "rss_before_mb": before, "rss_after_mb": lab.rss_mb()}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="default", help="the lab's model (default: the bundled default)")
    p.add_argument("--light", type=int, default=200)
    p.add_argument("--heavy", type=int, default=100)
    p.add_argument("--hangup", type=int, default=20)
    p.add_argument("--slow", type=int, default=1100)
    p.add_argument("--slow-seconds", type=float, default=30.0)
    p.add_argument("--reconnect-after", type=float, default=2.0, help="seconds before a closed slow client reopens")
    p.add_argument("--nofile", type=int, default=1024, help="the lab's open-file limit (default: 1024)")
    p.add_argument("lab_args", nargs="*", help="more `elmo lab` flags, after --")
    return p.parse_args()


async def main() -> None:
    args = parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.slow + 1000)), hard))  # ours, not the lab's
    with tempfile.TemporaryDirectory() as work:
        lab = Lab(["--model", args.model, *args.lab_args], args.nofile, Path(work) / "lab.log")
        try:
            print(json.dumps({"lab": {"port": lab.port, "rss_mb": lab.rss_mb(), "nofile": args.nofile}}), flush=True)
            print(json.dumps(await run_light(lab, args.light)), flush=True)
            heavy = [http(lab.port, "POST", "/api/contextual", LARGEST) for _ in range(args.heavy)]
            print(json.dumps(await scenario(lab, f"heavy: {args.heavy} concurrent largest requests", heavy)),
                  flush=True)
            print(json.dumps(await run_hangup(lab, args.hangup)), flush=True)
            print(json.dumps(await run_slowloris(lab, args.slow, args.slow_seconds, args.reconnect_after)), flush=True)
        finally:
            log = lab.stop()
        print(json.dumps({"lab_log": {"too_many_open_files": log.count("Too many open files"),
                                      "tracebacks": log.count("Traceback"), "tail": log[-500:]}}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
