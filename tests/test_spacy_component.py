"""The spaCy "elmo" component, found as a new user finds it: nlp.pipe(n_process=2) after the pipeline already ran in
the parent (it hung: torch's OpenMP pool across fork), the vector hooks after n_process=2 (spaCy drops them, W109),
what analyze_pipes says it assigns, and from_bytes on bytes that are not an elmo component (issue #66 class 6)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import subprocess_env

spacy = pytest.importorskip("spacy", reason="needs spaCy v3 (pip install 'elmo-bilm[spacy]')")
import srsly  # noqa: E402

from elmo.errors import ModelFileError  # noqa: E402

PROCESSES_SCRIPT = r"""
import json, sys, warnings
import numpy as np, spacy, torch
torch.set_num_threads(2)  # the parent's pool is started: the case that hung
warnings.simplefilter("always")
texts = ["I sat by the bank of the river .", "The bank lent me money .", "Rates rose ."] * 3
found = {}
for tensor in ("set", "none"):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": "model", "tensor": tensor, "batch_size": 2})
    nlp("The pipeline runs once in the parent first .")
    one = list(nlp.pipe(texts, n_process=1))
    two = list(nlp.pipe(texts, n_process=2, batch_size=2))
    pairs = list(nlp.pipe([(t, k) for k, t in enumerate(texts)], n_process=2, batch_size=2, as_tuples=True))
    found[tensor] = {
        "elmo": max(float(np.abs(a._.elmo - b._.elmo).max()) for a, b in zip(one, two)),
        "has_vector": all(t.has_vector for d in two for t in d),
        "similarity": [one[0][4].similarity(one[1][1]), two[0][4].similarity(two[1][1])],
        "doc_similarity": [one[0].similarity(one[1]), two[0].similarity(two[1])],
        "tuples": [k for _, k in pairs] == list(range(len(texts))) and all(d[1].has_vector for d, _ in pairs),
    }
print(json.dumps(found))
"""


@pytest.mark.slow
def test_n_process_2_after_the_parent_ran_neither_hangs_nor_loses_the_vectors(relative_model_dir):
    """Run in a child with a timeout: before the fix it waited forever in libgomp; after it, every Doc that comes
    back from a worker has the same layers and the same vectors and similarities as with n_process=1."""
    done = subprocess.run([sys.executable, "-c", PROCESSES_SCRIPT], env=dict(subprocess_env(), OMP_NUM_THREADS="2"),
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for tensor in ("set", "none"):
        case = found[tensor]
        assert case["elmo"] <= 1e-6
        assert case["has_vector"] and case["tuples"]
        assert abs(case["similarity"][0] - case["similarity"][1]) <= 1e-6
        assert abs(case["doc_similarity"][0] - case["doc_similarity"][1]) <= 1e-6
        assert case["similarity"][0] < 0.999  # ELMo's own cosine, not a default 1.0
    assert "W109" not in done.stderr  # the workers no longer set hooks that spaCy would have to drop


def test_analyze_pipes_shows_what_the_component_assigns(relative_model_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": relative_model_dir})
    assigns = nlp.analyze_pipes(pretty=False)["summary"]["elmo"]["assigns"]
    assert {"doc._.elmo", "doc.tensor", "doc.user_token_hooks"} <= set(assigns)


def garbage_cases(good: bytes) -> list[tuple[object, str]]:
    files = srsly.msgpack_loads(good)
    return [
        (b"", "expected the msgpack bytes"),
        (b"\xc1 not msgpack", "not the msgpack bytes"),
        ("a str", "expected the msgpack bytes"),
        (srsly.msgpack_dumps([1, 2, 3]), "expected the ELMo files"),
        (srsly.msgpack_dumps({"options.json": files["options.json"]}), "expected the ELMo files"),
        (srsly.msgpack_dumps({"options.json": "text", "weights.hdf5": files["weights.hdf5"]}), "non-empty bytes"),
        (srsly.msgpack_dumps({"options.json": b"{not json", "weights.hdf5": files["weights.hdf5"]}), "options"),
        (srsly.msgpack_dumps({"options.json": files["options.json"], "weights.hdf5": b"\x89HDF\r\n"}), "HDF5"),
        (good[: len(good) // 2], "not the msgpack bytes"),
    ]


def test_from_bytes_refuses_what_is_not_an_elmo_component_in_one_line(relative_model_dir, one_thread):
    nlp = spacy.blank("en")
    component = nlp.add_pipe("elmo", config={"model": relative_model_dir})
    good = component.to_bytes()
    for data, says in garbage_cases(good):
        with pytest.raises(ModelFileError, match=says) as caught:
            component.from_bytes(data)
        assert "\n" not in str(caught.value) and "elmo component 'elmo' from_bytes" in str(caught.value)
    component.from_bytes(good)  # and the real bytes still load
    assert component.bilm.num_layers == 3
