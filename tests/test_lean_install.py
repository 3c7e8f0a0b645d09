"""`pip install -e .` (torch, numpy, h5py, tqdm) is enough for the API, `elmo embed` and training.

The optional extras are hidden from a subprocess by an import hook, as if they were not installed.
"""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXTRAS = ["seqeval", "gensim", "matplotlib", "starlette", "uvicorn", "httpx2", "playwright", "pytest"]
HIDE = f"""
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {EXTRAS!r}:
            raise ImportError("not installed: " + name, name=name)
sys.meta_path.insert(0, Hide())
from elmo.cli import main
sys.exit(main(sys.argv[1:]))
"""


def elmo_without_extras(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", HIDE, *args], capture_output=True, text=True, env=env, cwd=cwd)


def test_core_install_embeds_with_the_bundled_model(tmp_path):
    done = elmo_without_extras("embed", str(REPO / "examples" / "sentences.txt"), "out.hdf5", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out.hdf5").is_file()


def test_an_extra_command_says_which_extra_to_install(tmp_path):
    done = elmo_without_extras("lab", "--no-browser", cwd=tmp_path)
    assert done.returncode == 2 and "pip install 'elmo-bilm[lab]'" in done.stderr
