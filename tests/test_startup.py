"""Start-up stays light (issue #62): loading a model and embedding a sentence never imports
torch._dynamo (with sympy and torch.distributed, ~800 modules and ~1 s that every command paid when
the weight loader initialised its meta-device shape check). A structural test, not a timed one:
benchmarks/startup.py times it."""

import json
import subprocess
import sys

import pytest
import torch
from conftest import ALLENNLP, BILM_TF, micro_options, need, subprocess_env

from elmo import BiLM
from elmo.formats.weights import dataset_map
from elmo.model.options import BiLMConfig

PROBE = """
import json, sys
import elmo
from elmo import Embedder
embedder = Embedder.from_files(sys.argv[1], sys.argv[2], int8=sys.argv[3] == "int8")
vectors = embedder.embed_sentence(["The", "bank", "by", "the", "river", "."])
print(json.dumps({"shape": list(vectors.shape), "dynamo": "torch._dynamo" in sys.modules,
                  "sympy": "sympy" in sys.modules}))
"""


def _probe(model_dir, precision: str) -> dict:
    weights = next(p for p in (model_dir / "lm_weights.hdf5", model_dir / "weights.hdf5") if p.is_file())
    done = subprocess.run([sys.executable, "-c", PROBE, str(model_dir / "options.json"), str(weights), precision],
                          capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("fixture", [ALLENNLP, BILM_TF], ids=["allennlp-elmo", "bilm-tf-model"])
def test_loading_and_embedding_imports_no_dynamo(fixture):
    found = _probe(need(fixture), "float32")
    assert found["shape"][1] == 6
    assert not found["dynamo"] and not found["sympy"], found


def test_int8_loading_and_embedding_imports_no_dynamo():
    pytest.importorskip("torch.ao.quantization")
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        pytest.skip("int8 needs torch's fbgemm kernels, absent from this torch build")
    found = _probe(need(ALLENNLP), "int8")
    assert found["shape"][1] == 6
    assert not found["dynamo"] and not found["sympy"], found  # Module.to_empty on meta imported sympy


def test_a_shape_only_bilm_has_every_shape_of_an_initialised_one():
    """The uninitialised (meta) copy that the loader checks files against has the same datasets and
    shapes as a built model: skipping initialisation loses no part of the check."""
    config = BiLMConfig.from_options(micro_options(24, 12, (4, 4, 8)), "micro")
    with torch.device("meta"):
        shapes = {name: shape for name, (_, shape) in dataset_map(BiLM(config, initialize=False)).items()}
    built = {name: shape for name, (_, shape) in dataset_map(BiLM(config)).items()}
    assert shapes == built and len(built) > 10
