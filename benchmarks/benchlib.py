"""What the speed benchmarks share (speed.py, int8_speed.py, document_speed.py): the sentences they time,
the machine's measured GEMM limit, a model of a preset's shape with random weights, running a worker in
its own process and saving results as they come.

The benchmarks import it as `python benchmarks/x.py` finds it (the script's folder is on the path);
pytest finds it through pyproject's `pythonpath`.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from elmo.training.presets import preset_options

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = Path(os.environ.get("ELMO_SHARED", REPO.parent / "shared"))
SENTENCES = SHARED / "data" / "wiki_corpus" / "valid.txt"
SPEED_WORKER = [sys.executable, str(HERE / "speed.py"), "worker"]  # `speed.py worker embed|train ...`


def options_for(shape: str) -> dict:
    """A preset's architecture (`elmo train --preset`), with the inference-time character table."""
    options = preset_options(shape)
    options["char_cnn"]["n_characters"] = 262
    return {key: options[key] for key in ("lstm", "char_cnn")}


def random_model(shape: str, directory: Path) -> tuple[Path, Path]:
    """options.json and weights.hdf5 of a preset's shape with random weights (`torch.manual_seed(0)`), in a new
    `directory`: the same model in every benchmark and every run."""
    from elmo import save_bilm
    from elmo.model.bilm import BiLM
    from elmo.model.options import BiLMConfig

    torch.manual_seed(0)
    directory.mkdir()
    save_bilm(BiLM(BiLMConfig.from_options(options_for(shape))), directory / "options.json", directory / "weights.hdf5")
    return directory / "options.json", directory / "weights.hdf5"


def write_sentences(work: Path, count: int) -> tuple[Path, list[str]]:
    """The first `count` lines of SENTENCES in work/sentences.txt, and those lines."""
    sentence_file = work / "sentences.txt"
    lines = SENTENCES.read_text(encoding="utf-8").splitlines()[:count]
    sentence_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return sentence_file, lines


def gemm_flops(threads: int, device: str = "cpu", dtype: torch.dtype = torch.float32, passes: int = 5) -> float:
    """Measured GEMM FLOP/s at this thread count (CPU) or on this GPU: the machine's practical limit.

    2048^3 on a CPU; 8192^3 on a GPU, where a smaller product cannot fill the chip. fp32 on a GPU is
    full precision (no TF32), as our fp32 path computes it.
    """
    torch.set_num_threads(threads)
    size = 8192 if device.startswith("cuda") else 2048
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    times = []
    for _ in range(passes + 1):
        sync(device)
        start = time.perf_counter()
        torch.mm(a, b)
        sync(device)
        times.append(time.perf_counter() - start)
    return 2.0 * size**3 / statistics.median(times[1:])


def gemm_flops_in_child(threads: int, device: str = "cpu", dtype: str = "float32") -> float:
    """`gemm_flops` measured in a child process, so the harness itself never starts OpenMP's threads: under
    OMP_WAIT_POLICY=ACTIVE they would spin on a core for the rest of the run, beside every timed worker (it
    halved the 2-thread rows once)."""
    code = (f"import sys, torch; sys.path.insert(0, {str(HERE)!r}); from benchlib import gemm_flops; "
            f"print(gemm_flops({threads}, {device!r}, torch.{dtype}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def gemm_flops_around(threads: int, device: str, precision: str, world: int = 1) -> float:
    """The GEMM limit measured in the worker itself, on all the threads its row uses (rank 0 measures
    while other ranks wait): this VM's rate drifts by up to 2x within minutes, so each row's fraction
    of the limit is taken against the rate of its own minutes, not the one at the start of the run."""
    if world > 1:
        torch.distributed.barrier()
    rate = None
    if world == 1 or torch.distributed.get_rank() == 0:
        torch.set_num_threads(threads * world)
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        rate = gemm_flops(threads * world, device, dtype, passes=3)
        torch.set_num_threads(threads)
    if world > 1:
        torch.distributed.barrier()
    return rate


def sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def gpu_peak_mb(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**20 if str(device).startswith("cuda") else None


def run_json(cmd: list[str], env: dict | None = None) -> dict:
    """Run a worker in its own process (so peak RSS is its own) and read the JSON of its last line."""
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def max_diff(a_path: str, b_path: str) -> float:
    a, b = np.load(a_path), np.load(b_path)
    return max(float(np.abs(a[k] - b[k]).max()) if a[k].size else 0.0 for k in a.files)


def save_results(results: dict, out: Path) -> None:
    """After every row: an interrupted run keeps what it measured (written under a temporary name, then renamed)."""
    out.parent.mkdir(exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    tmp.replace(out)


# A process's own peak RSS in MB: /proc's VmHWM, which starts again at exec. (getrusage's ru_maxrss keeps the
# parent's peak across a vfork + exec, so a child of a large benchmark process would report at least that.)
PEAK_RSS_MB = "[int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')][0] / 1024"
# `elmo embed` as its console script runs it, its peak RSS on the last line of stderr.
EMBED_PROCESS = f"""
import json, sys
from elmo.cli import main
code = main(sys.argv[1:])
print(json.dumps({{"code": code, "peak_rss_mb": {PEAK_RSS_MB}}}), file=sys.stderr)
sys.exit(code)
"""


def peak_rss_mb() -> float:
    """This process's own peak RSS in MB (see PEAK_RSS_MB)."""
    return eval(PEAK_RSS_MB)  # noqa: S307 (our own constant expression)


def code_env(src: str, threads: int) -> dict:
    """The environment that runs the code in `src` (a src/ folder) on `threads` threads."""
    return dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""),
                OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))


def timed_process(cmd: list[str], env: dict) -> tuple[float, str, str]:
    """Wall seconds from spawn to exit, its stdout and stderr; exits with its stderr if it fails."""
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-3000:]}")
    return seconds, done.stdout, done.stderr


def embed_process(src: str, sentences: Path, out: Path, flags: list[str], threads: int) -> dict:
    """The whole `elmo embed sentences out FLAGS` process on the code in `src`: wall seconds from spawn
    to exit (start-up included) and its own peak RSS."""
    cmd = [sys.executable, "-c", EMBED_PROCESS, "embed", str(sentences), str(out), "--overwrite", *flags]
    seconds, _, err = timed_process(cmd, code_env(src, threads))
    out.unlink()
    return {"process_s": seconds, "peak_rss_mb": json.loads(err.strip().splitlines()[-1])["peak_rss_mb"]}


def machine() -> str:
    """The CPU's model name, cores and torch's CPU capability, for the header of a results table."""
    name = platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            name = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), name)
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores, {torch.backends.cpu.get_cpu_capability()}"
