"""SeqVec's and bio_embeddings' numbers as AllenNLP's own code gives them, for tests/test_seqvec_peer.py.

    python scripts/make_seqvec_references.py --peer-python PEER_VENV/bin/python

PEER_VENV is ../shared/tools/allennlp-peer-venv.sh's virtualenv (AllenNLP 2.10.1 on CPU torch). The model is the
SeqVec-shaped one with random weights, seed SEED (`elmo.proteins.write_random_model`: numpy's generator, so the test
makes the same 374 MB of weights again without keeping them); scripts/seqvec_peer_worker.py runs in the peer venv on
those files and writes every `--column-step`-th column of each output (all 1024 of the per-protein vector), so the
reference stays small. Writes tests/data/seqvec/peer-references.npz and peer-references.json (how it was made).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import tempfile
from pathlib import Path

from elmo.files.fileio import hash_file
from elmo.proteins import write_random_model

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "seqvec"
SEED = 0
COLUMN_STEP = 8


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer-python", required=True, help="the AllenNLP peer virtualenv's python")
    args = p.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        files = write_random_model(tmp, seed=SEED)
        npz = OUT / "peer-references.npz"
        subprocess.run([args.peer_python, str(REPO / "scripts" / "seqvec_peer_worker.py"), "--options",
                        str(files.options_file), "--weights", str(files.weight_file), "--out", str(npz),
                        "--column-step", str(COLUMN_STEP)], check=True)
        weights_sha256 = hash_file(files.weight_file).hexdigest()
    version = subprocess.run([args.peer_python, "-c", "import allennlp, torch; print(allennlp.__version__, "
                              "torch.__version__)"], capture_output=True, text=True, check=True).stdout.split()
    (OUT / "peer-references.json").write_text(json.dumps({
        "made_by": "scripts/make_seqvec_references.py (worker: scripts/seqvec_peer_worker.py)",
        "peer": f"allennlp {version[0]} (_ElmoBiLm), torch {version[1]}, CPU, 1 thread",
        "model": f"elmo.proteins.write_random_model(seed={SEED}): SeqVec's shapes (SEQVEC_OPTIONS), random weights",
        "weights_sha256": weights_sha256,
        "column_step": COLUMN_STEP,
        "npz_sha256": hashlib.sha256(npz.read_bytes()).hexdigest(),
    }, indent=1) + "\n")


if __name__ == "__main__":
    main()
