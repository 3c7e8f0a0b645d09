"""`elmo serve` under load: batched against one request per model call, in one run (issue #65 item 4).

    python benchmarks/serve_load.py --shapes bundled,original --concurrency 1,8,64 --seconds 10 --repeats 3 \\
        --out benchmarks/results/serve-load-cpu.json
    python benchmarks/serve_load.py --render benchmarks/results/serve-load-cpu.json
    python benchmarks/serve_load.py --model-alone --out benchmarks/results/serve-model-alone-cpu.json

For each shape, two `elmo serve --threads 1` processes: `batched` with its defaults (--max-batch-tokens
4096 --max-wait-ms 5), `one per call` with --max-batch-tokens 1 (every model call runs one request).
For each concurrency C, --repeats rounds of a run against each server in turn (medians reported): in a
run, C clients in this process (asyncio streams, one keep-alive connection each) send `POST
/v1/embeddings` with one line of ../shared/data/wiki_corpus/valid.txt each (in turn, each client its own
lines), back to back, for --seconds after a warm-up; requests begun by then are waited for. Reported: requests/s and tokens/s
(completed over the time to the last answer), p50 and p99 latency, answers other than 200, the peak
RSS of the server and its worker process (summed), and the CPU seconds the clients took (they share
the machine with the server: pin both with taskset to say where). `bundled` is the bundled default
model; `original` the published ELMo's shapes with random weights (`torch.manual_seed(0)`).

    python benchmarks/serve_load.py --shapes bundled --settings t1w1,t2w1,t1w2,t2w2 --concurrency 1,8,64 \
        --seconds 8 --repeats 2 --out benchmarks/results/serve-threads-cpu.json

`--settings`: instead of the two modes, one batching server per setting `tTwW` (`--threads T --workers
W`), measured in turn the same way; the table compares each with `t1w1`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchlib import HERE, SENTENCES, random_model, save_results

MODES = {"batched": ["--threads", "1"], "one per call": ["--threads", "1", "--max-batch-tokens", "1", "--max-wait-ms", "0"]}
SHAPES = ("bundled", "original", "small")


def start_server(shape: str, work: Path, mode_flags: list[str]) -> tuple[subprocess.Popen, str]:
    model = ["--model", "default"] if shape == "bundled" else []
    if not model:
        directory = work / shape
        if not directory.exists():
            random_model(shape, directory)
        model = ["--options", str(directory / "options.json"), "--weights", str(directory / "weights.hdf5")]
    cmd = [sys.executable, "-m", "elmo", "serve", *model, "--port", "0", *mode_flags]
    log = open(work / f"server-{shape}-{len(list(work.glob('server-*')))}.log", "w")  # read if it fails
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, cwd=HERE.parent)
    line = server.stdout.readline()
    if " at " not in line:
        sys.exit(f"the server did not start: see {log.name}")
    return server, line.split(" at ")[1].split()[0].rstrip("/")


def peak_rss_mb(pid: int) -> float:
    """The peak RSS of a process and its children (the server's worker processes hold the model), summed."""
    children = [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]
    own = [int(x.split()[1]) for x in open(f"/proc/{pid}/status") if x.startswith("VmHWM")][0] / 1024
    return own + sum(peak_rss_mb(child) for child in children)


class Connection:
    """One keep-alive HTTP/1.1 connection on asyncio streams: a load generator's client, a fraction of a
    millisecond of CPU per request (httpx took about 10 ms here, on the core the server shares)."""

    def __init__(self, url: str):
        self.host, self.port = url.removeprefix("http://").rsplit(":", 1)
        self.reader = self.writer = None

    async def post(self, path: str, payload: dict) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, int(self.port))
        body = json.dumps(payload).encode()
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = int(next(line.split(b":")[1] for line in head.lower().split(b"\r\n") if line.startswith(b"content-length")))
        answer = await self.reader.readexactly(length)
        if b"connection: close" in head.lower():
            self.writer.close()
            self.writer = None
        return status, answer

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def load(url: str, lines: list[str], concurrency: int, seconds: float, warmup: int = 4) -> dict:
    warm = Connection(url)
    for line in lines[:warmup]:
        assert (await warm.post("/v1/embeddings", {"input": line}))[0] == 200
    warm.close()
    latencies, tokens, failures = [], [], 0
    start = time.perf_counter()
    deadline = start + seconds
    last = start

    async def user(k: int) -> None:
        nonlocal failures, last
        connection, i = Connection(url), k
        while time.perf_counter() < deadline:
            line = lines[i % len(lines)]
            i += concurrency
            sent = time.perf_counter()
            status, answer = await connection.post("/v1/embeddings", {"input": line})
            done = time.perf_counter()
            if status != 200:
                failures += 1
                continue
            latencies.append(done - sent)
            tokens.append(json.loads(answer)["usage"]["prompt_tokens"])
            last = max(last, done)
        connection.close()

    cpu = resource.getrusage(resource.RUSAGE_SELF)
    await asyncio.gather(*(user(k) for k in range(concurrency)))
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    elapsed = last - start
    return {"requests": len(latencies), "failures": failures, "seconds": elapsed,
            "requests_per_s": len(latencies) / elapsed, "tokens_per_s": sum(tokens) / elapsed,
            "p50_s": float(np.percentile(latencies, 50)), "p99_s": float(np.percentile(latencies, 99)),
            "client_cpu_s": (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu.ru_utime + cpu.ru_stime)}


def parse_settings(text: str) -> dict[str, list[str]]:
    """`t1w1,t2w1` -> {"threads 1, workers 1": ["--threads", "1", "--workers", "1"], ...}."""
    settings = {}
    for item in [t for t in text.split(",") if t]:
        threads, _, workers = item.removeprefix("t").partition("w")
        if not (threads.isdigit() and workers.isdigit()):
            sys.exit(f"--settings: expected items such as t1w2 (threads 1, workers 2), found {item!r}")
        settings[f"threads {threads}, workers {workers}"] = ["--threads", threads, "--workers", workers]
    return settings


def measure(args: argparse.Namespace, results: dict, work: Path, lines: list[str]) -> None:
    """Every mode's server up at once; per concurrency, --repeats rounds of each mode in turn, so that they
    are measured side by side under the same load of the machine; medians over the rounds."""
    modes = parse_settings(args.settings) if args.settings else MODES
    for shape in [s for s in args.shapes.split(",") if s]:
        if shape not in SHAPES:
            sys.exit(f"--shapes: expected any of {SHAPES}, found {shape!r}")
        servers = {mode: start_server(shape, work, flags) for mode, flags in modes.items()}
        try:
            for concurrency in [int(c) for c in args.concurrency.split(",")]:
                passes: dict[str, list[dict]] = {mode: [] for mode in modes}
                for _ in range(args.repeats):
                    for mode, (server, url) in servers.items():
                        passes[mode].append(asyncio.run(load(url, lines, concurrency, args.seconds)))
                for mode, (server, _) in servers.items():
                    row = {"shape": shape, "mode": mode, "concurrency": concurrency, **median_pass(passes[mode]),
                           "passes": passes[mode], "server_peak_rss_mb": peak_rss_mb(server.pid)}
                    results["rows"].append(row)
                    save_results(results, Path(args.out))
                    print(json.dumps({k: v for k, v in row.items() if k != "passes"}), flush=True)
        finally:
            for server, _ in servers.values():
                server.send_signal(signal.SIGTERM)
                server.wait(120)


def median_pass(passes: list[dict]) -> dict:
    """Each figure's median over the rounds (failures: their sum)."""
    keys = [k for k in passes[0] if k != "failures"]
    return {**{k: float(np.median([p[k] for p in passes])) for k in keys},
            "failures": sum(p["failures"] for p in passes)}


def model_alone(args: argparse.Namespace, work: Path, lines: list[str]) -> dict:
    """The bound batching works under: the model alone (an `Embedder` in this process, 1 thread), tokens/s
    embedding the clients' first 128 lines one sentence per call and in calls of 64, median of 3 passes."""
    import statistics

    import torch

    from elmo import Embedder

    torch.set_num_threads(1)
    sentences = [line.split() for line in lines[:128]]
    tokens = sum(map(len, sentences))
    rows = []
    for shape in [s for s in args.shapes.split(",") if s]:
        if shape == "bundled":
            embedder = Embedder.from_model("default")
        else:
            directory = work / shape
            random_model(shape, directory)
            embedder = Embedder.from_files(directory / "options.json", directory / "weights.hdf5")
        for batch in (1, 64):
            list(embedder.embed_sentences(sentences[:batch], batch_size=batch))  # warm-up
            times = []
            for _ in range(3):
                start = time.perf_counter()
                list(embedder.embed_sentences(sentences, batch_size=batch))
                times.append(time.perf_counter() - start)
            rows.append({"shape": shape, "batch": batch, "tokens_per_s": tokens / statistics.median(times)})
            print(json.dumps(rows[-1]), flush=True)
    return {"sentences": len(sentences), "tokens": tokens, "rows": rows}


def markdown_table(results: dict) -> str:
    """The two modes (batched against one per call), or the settings (each against threads 1, workers 1)."""
    settings = not any(r["mode"] in MODES for r in results["rows"])
    baseline = "threads 1, workers 1" if settings else "one per call"
    out = [f"| shape | concurrency | {'setting' if settings else 'mode'} | requests/s | tokens/s | "
           f"{'against ' + baseline if settings else 'batched / one per call'} | p50 ms | p99 ms | not 200 "
           "| server peak RSS MB | client CPU s / wall s |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    one = {(r["shape"], r["concurrency"]): r["requests_per_s"] for r in results["rows"] if r["mode"] == baseline}
    for r in sorted(results["rows"], key=lambda r: (r["shape"], r["concurrency"], r["mode"])):
        base = one.get((r["shape"], r["concurrency"]))
        ratio = f"**x{r['requests_per_s'] / base:.2f}**" if base and r["mode"] != baseline else "-"
        out.append(f"| {r['shape']} | {r['concurrency']} | {r['mode']} | {r['requests_per_s']:.1f} | "
                   f"{r['tokens_per_s']:,.0f} | {ratio} | {r['p50_s'] * 1000:,.0f} | {r['p99_s'] * 1000:,.0f} | "
                   f"{r['failures']} | {r['server_peak_rss_mb']:,.0f} | {r['client_cpu_s']:.1f} / {r['seconds']:.1f} |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="bundled,original", help=f"any of {', '.join(SHAPES)}")
    p.add_argument("--concurrency", default="1,8,64")
    p.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    p.add_argument("--settings", help="instead of batched against one per call: batching servers with these "
                   "threads and workers, e.g. t1w1,t2w1,t1w2,t2w2")
    p.add_argument("--repeats", type=int, default=3, help="rounds of both modes per concurrency (medians reported)")
    p.add_argument("--lines", type=int, default=2000, help="lines of wiki_corpus valid the clients send")
    p.add_argument("--out", default=str(HERE / "results" / "serve-load-cpu.json"))
    p.add_argument("--render", metavar="JSON", help="measure nothing: print the table of a results file")
    p.add_argument("--model-alone", action="store_true",
                   help="no server: time the model alone, one sentence per call against 64 (the bound on batching)")
    args = p.parse_args()
    if args.render:
        print(markdown_table(json.loads(Path(args.render).read_text())))
        return
    if not SENTENCES.exists():
        sys.exit(f"needs {SENTENCES}")
    lines = [line for line in SENTENCES.read_text(encoding="utf-8").splitlines()[: args.lines] if line.split()]
    results = {"machine": {"platform": platform.platform(), "processor": platform.processor()},
               "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": " ".join(sys.argv),
               "seconds": args.seconds, "lines": len(lines), "rows": []}
    if args.model_alone:
        results["model_alone"] = model_alone(args, Path(tempfile.mkdtemp(prefix="elmo-serve-load-")), lines)
        save_results(results, Path(args.out))
        return
    measure(args, results, Path(tempfile.mkdtemp(prefix="elmo-serve-load-")), lines)
    print(markdown_table(results))


if __name__ == "__main__":
    main()
