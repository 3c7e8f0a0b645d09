"""`keep_freed_memory`: large tensors freed and allocated again reuse their pages (no fresh page faults)."""

import os
import platform
import subprocess
import sys

import pytest

SCRIPT = """
import resource, torch
from elmo.model import allocator
from elmo.embed.embedder import Embedder
from elmo.model.bilm import BiLM
from elmo.model.options import BiLMConfig
Embedder(BiLM(BiLMConfig.from_options({"lstm": {"dim": 8, "projection_dim": 4, "n_layers": 1},
    "char_cnn": {"filters": [[1, 4]], "n_highway": 1, "embedding": {"dim": 4}, "n_characters": 262,
                 "max_characters_per_token": 50, "activation": "relu"}})))
applied = allocator._applied  # set by the Embedder on a CPU
for _ in range(8):  # until the heap holds a free block that fits (alignment can take a few rounds)
    torch.empty(16 << 20).fill_(1.0)  # 64 MB, freed at once
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    torch.empty(16 << 20).fill_(2.0)
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def run(setting: str) -> tuple[bool, int]:
    env = dict(os.environ, ELMO_KEEP_FREED_MEMORY=setting)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    applied, faults = out.stdout.split()
    return applied == "True", int(faults)


@pytest.mark.slow  # two subprocesses embedding with 64 MB buffers, counting page faults
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt settings of glibc; this C library is not glibc")
def test_an_embedder_keeps_freed_memory_for_the_next_batch():
    applied, faults = run("1")
    assert applied
    assert faults < 1000  # four fresh 64 MB buffers would be ~65,000 page faults of 4 KB

    applied, faults = run("0")  # the opt-out: glibc's default, each large allocation is a fresh mapping
    assert not applied
    assert faults > 60000
