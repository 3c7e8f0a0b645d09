"""`pip install -e .` (torch, numpy, h5py, tqdm) is enough for the API, `elmo embed` and training.

The optional extras are hidden from a subprocess by an import hook, as if they were not installed.
"""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import subprocess_env

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
print("embed", main(sys.argv[1:]))
print("lab", main(["lab", "--no-browser"]))
"""


@pytest.mark.slow  # end to end: `elmo embed` in a second interpreter
def test_core_install_embeds_and_an_extra_command_names_its_extra(tmp_path):
    """One interpreter (torch imports once): `elmo embed` with the bundled model, then `elmo lab`."""
    env = subprocess_env()
    done = subprocess.run([sys.executable, "-c", HIDE, "embed", str(REPO / "examples" / "sentences.txt"), "out.hdf5"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["embed", "0", "lab", "2"], done.stdout
    assert (tmp_path / "out.hdf5").is_file()
    assert "pip install 'elmo-bilm[lab]'" in done.stderr
