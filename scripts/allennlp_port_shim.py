"""Stand-ins for the AllenNLP names that AllenNLP's ELMo tests import, backed by `elmo`.

Used only by scripts/port_allennlp_elmo_tests.py, which rewrites the tests' imports to this module
(the "minimum change" port of the issue). AllenNLP's data pipeline (indexers, vocabulary, batches)
stays AllenNLP's, so the character ids the tests feed are AllenNLP's own.
"""
import os
import sys
from pathlib import Path

import torch

import elmo
from elmo.cli import main as elmo_main
from elmo.model.boundaries import add_sentence_boundaries

FIXTURES = Path(os.environ["ELMO_SHARED"]) / "fixtures"  # set by port_allennlp_elmo_tests.py


class AllenNlpTestCase:
    """AllenNLP's base test case minus its logging and temp-dir setup (which imports all of allennlp)."""

    FIXTURES_ROOT = FIXTURES

    def setup_method(self):
        pass

    def setUp(self):  # 0.9 style
        self.setup_method()


ConfigurationError = ValueError  # what this package raises for AllenNLP's ConfigurationError cases


class _ElmoBiLm(torch.nn.Module):
    """AllenNLP's biLM: stateful, forward(char ids, word ids) -> {'activations', 'mask'}."""

    def __init__(self, options_file, weight_file, requires_grad=False, vocab_to_cache=None):
        super().__init__()
        self.e = elmo.Elmo(options_file, weight_file, 0, requires_grad=requires_grad,
                           vocab_to_cache=vocab_to_cache, stateful=True)
        self.num_layers = self.e.bilm.num_layers

    def forward(self, inputs, word_inputs=None):
        bilm = self.e.bilm
        if word_inputs is not None and self.e._word_cache is not None:
            mask = word_inputs > 0
            out = bilm(token_vectors=self.e._cached_token_vectors(inputs, word_inputs, mask), mask=mask)
        else:
            out = bilm(inputs)
        return {"activations": out.layers, "mask": out.mask}


class _ElmoCharacterEncoder(torch.nn.Module):
    def __init__(self, options_file, weight_file, requires_grad=False):
        super().__init__()
        self.bilm = elmo.load_bilm(options_file, weight_file)

    def forward(self, inputs):
        mask = (inputs > 0).any(-1)
        vectors = self.bilm.token_vectors(inputs, mask)
        bos, eos = self.bilm.boundary_vectors()
        x, m = add_sentence_boundaries(vectors, mask, bos, eos)
        return {"token_embedding": x * m.unsqueeze(-1), "mask": m}


def Elmo(*args, **kwargs):
    return elmo.Elmo(*args, **kwargs)


class ElmoTokenEmbedder(torch.nn.Module):
    def __init__(self, options_file, weight_file, requires_grad=False, dropout=0.5):
        super().__init__()
        self._elmo = elmo.Elmo(options_file, weight_file, 1, requires_grad=requires_grad, dropout=dropout)

    def forward(self, ids):
        return self._elmo(ids)["elmo_representations"][0]


def ElmoEmbedder(options_file=None, weight_file=None, cuda_device=-1):
    """0.9's embedder carried state between calls; the tests rely on it."""
    return elmo.ElmoEmbedder(options_file, weight_file, cuda_device, stateful=True)


def main():
    """0.9's `allennlp elmo IN OUT --all --options-file O --weight-file W` -> `elmo embed`."""
    argv = sys.argv[2:]
    mapped = [{"--options-file": "--options", "--weight-file": "--weights"}.get(a, a) for a in argv]
    rc = elmo_main(["embed", *mapped])
    if rc:
        raise ConfigurationError(f"elmo embed exited {rc}")
