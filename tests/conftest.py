"""Shared paths. Data and fixtures are read from ../shared beside the checkout, never copied in."""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ELMO_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures"
ALLENNLP = FIXTURES / "allennlp-elmo"
BILM_TF = FIXTURES / "bilm-tf-model"
DATA = SHARED / "data"

# The tests write nothing into the user's cache (an int8 load stores its weights there): one cache for the run,
# inherited by every subprocess; a test that needs its own sets ELMO_CACHE itself.
_RUN_CACHE = Path(tempfile.mkdtemp(prefix="elmo-tests-cache-"))
os.environ["ELMO_CACHE"] = str(_RUN_CACHE)
atexit.register(shutil.rmtree, _RUN_CACHE, ignore_errors=True)


def micro_options(dim: int, projection_dim: int, widths: tuple[int, ...]) -> dict:
    """options.json of a biLM small enough to train in seconds."""
    return {
        "lstm": {"dim": dim, "projection_dim": projection_dim, "n_layers": 2, "cell_clip": 3, "proj_clip": 3,
                 "use_skip_connections": True},
        "char_cnn": {"activation": "relu", "embedding": {"dim": 4}, "filters": [[w + 1, n] for w, n in enumerate(widths)],
                     "n_highway": 1, "max_characters_per_token": 50, "n_characters": 262},
    }


MICRO = micro_options(16, 8, (4, 4, 8))  # the training unit tests' model
MICRO_RUN = micro_options(32, 16, (8, 8, 16))  # the end-to-end runs' model (train, export, resume)


def subprocess_env() -> dict:
    """The environment of a second interpreter: this checkout's code (as pytest's `pythonpath`), one thread."""
    return dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
                OMP_NUM_THREADS="1")


def word_ids(sentences: list[list[str]], index: dict[str, int]) -> torch.Tensor:
    """(B, T) ids of each word in `index` (a word cache's rows), 0 after each sentence's end."""
    ids = torch.zeros(len(sentences), max(map(len, sentences)), dtype=torch.long)
    for r, s in enumerate(sentences):
        ids[r, : len(s)] = torch.tensor([index[w] for w in s])
    return ids


def assert_word_cache_matches(elmo, sentences: list[list[str]], index: dict[str, int]) -> torch.Tensor:
    """`Elmo`'s cached word vectors give the outputs of its char CNN (atol 1e-6); -> the char ids used."""
    from elmo import batch_to_ids

    ids = batch_to_ids(sentences)
    with torch.no_grad():
        cached, direct = elmo(ids, word_ids(sentences, index)), elmo(ids)
    assert torch.equal(cached["mask"], direct["mask"])
    torch.testing.assert_close(cached["elmo_representations"][0], direct["elmo_representations"][0], atol=1e-6, rtol=0)
    return ids


def model_flags(d: Path) -> list[str]:
    """The `--options/--weights` flags of the model files in `d` (the AllenNLP fixture's names)."""
    return ["--options", str(d / "options.json"), "--weights", str(d / "lm_weights.hdf5")]


def need(path: Path) -> Path:
    """Skip (with the reason) when a shared file is absent; CI has ../shared, so there it runs."""
    if not path.exists():
        pytest.skip(f"needs {path} (the project's shared fixtures/data beside the checkout; "
                    "scripts/get_test_data.py fetches those with a public source)")
    return path


def train_micro_run(root: Path, steps: int) -> tuple[Path, list[str]]:
    """A `steps`-step training run of the MICRO_RUN biLM on bilm-tf's fixture text, in root/run (seconds);
    -> the run folder and the train flags (for --resume and refusal tests)."""
    from elmo.cli import main
    data = need(BILM_TF / "train" / "data.txt")
    (root / "micro.json").write_text(json.dumps(MICRO_RUN))
    assert main(["vocab", str(data), "-o", str(root / "vocab.txt")]) == 0
    flags = ["--train", str(data), "--vocab", str(root / "vocab.txt"), "--options", str(root / "micro.json"),
             "--batch-size", "4", "--unroll-steps", "5", "--negatives", "8", "--threads", "1", "--no-progress"]
    assert main(["train", *flags, "--out", str(root / "run"), "--max-steps", str(steps)]) == 0
    return root / "run", flags


def load_script(relative: str):
    """A script of the repo (benchmarks/, scripts/) imported as a module, to test its functions."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def train_small_vectors(out: Path) -> Path:
    """16-d word2vec on 400 wiki_corpus sentences (seconds): the static arm of the task tests."""
    from elmo.cli import main
    corpus = need(DATA / "wiki_corpus" / "valid.txt")
    assert main(["static", "train", str(corpus), "-o", str(out), "--dim", "16", "--min-count", "1", "--epochs", "1",
                 "--max-sentences", "400"]) == 0
    return out


@pytest.fixture(scope="session")
def allennlp_dir() -> Path:
    return need(ALLENNLP)


@pytest.fixture(scope="session")
def bilm_tf_dir() -> Path:
    return need(BILM_TF)


@pytest.fixture(scope="session")
def model_args(allennlp_dir) -> list[str]:
    """`elmo` command flags naming the AllenNLP fixture's model files."""
    return model_flags(allennlp_dir)


@pytest.fixture(scope="session")
def embedder(allennlp_dir):
    """A stateless `Embedder` of the AllenNLP fixture model, loaded once per session (tests only read it)."""
    from elmo import Embedder

    return Embedder.from_files(allennlp_dir / "options.json", allennlp_dir / "lm_weights.hdf5")


@pytest.fixture(scope="session")
def fixture_sentences(allennlp_dir) -> list[list[str]]:
    """The 3 lists of 10 sentences; batch i is [lists[0][i], lists[1][i], lists[2][i]]."""
    return json.loads((allennlp_dir / "sentences.json").read_text())


@pytest.fixture
def keep_threads():
    """Restore torch's thread count after a test that sets it (training takes --threads)."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def one_thread():
    """Tiny tensors: torch's thread pool only costs time on a shared 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def relative_model_dir(tmp_path, allennlp_dir, monkeypatch) -> str:
    """The tiny fixture biLM as a model folder "model", named relative to the current directory (tmp_path):
    what a saved spaCy pipeline or config names."""
    (tmp_path / "model").mkdir()
    shutil.copy(allennlp_dir / "options.json", tmp_path / "model" / "options.json")
    shutil.copy(allennlp_dir / "lm_weights.hdf5", tmp_path / "model" / "weights.hdf5")
    monkeypatch.chdir(tmp_path)
    return "model"


def make_config(**overrides):
    """A small biLM config (two layers, skip connections, four filter banks, two highways); overrides as
    {"lstm.dim": 32, "char_cnn.activation": "tanh", ...}."""
    from elmo.model.options import BiLMConfig

    options = {
        "lstm": {"dim": 24, "projection_dim": 8, "n_layers": 2, "cell_clip": 3, "proj_clip": 3,
                 "use_skip_connections": True},
        "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 6], [3, 8], [7, 5]], "n_highway": 2,
                     "activation": "relu", "n_characters": 262, "max_characters_per_token": 50},
    }
    for key, value in overrides.items():
        section, name = key.split(".")
        options[section][name] = value
    return BiLMConfig.from_options(options)
