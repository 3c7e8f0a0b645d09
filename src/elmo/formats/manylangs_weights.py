"""ELMoForManyLangs' token_embedder.pkl / encoder.pkl (torch state_dicts) -> this package's BiLM parameters.

Their modules are AllenNLP's (docs/manylangs.md): the token embedder is `_ElmoCharacterEncoder`'s
convolutions, highways and projection (plus a word embedding beside them) and the encoder is
`ElmoLstm`'s cells, saved under other names. So their weights load through the same exact
conversions as AllenNLP's state_dicts (src/elmo/formats/allennlp_state.py), with `their_key` mapping
AllenNLP's names to theirs, and the shapes they must have come from those rules too.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import torch

from elmo.errors import ModelFileError
from elmo.files.torch_files import load_torch_file
from elmo.model.bilm import BiLM

from .allennlp_state import Rule, allennlp_shapes, encoder_rules, token_embedder_rules

Shapes = dict[str, tuple[int, ...]]
# AllenNLP's token embedder names -> ELMoForManyLangs' ConvTokenEmbedder names
_THEIR_NAMES = ((r"^_char_embedding_weights$", "char_emb_layer.embedding.weight"), (r"^char_conv_(\d+)\.", r"convolutions.\1."),
                (r"^_highways\.", "highways."), (r"^_projection\.", "projection."))
WORD_TABLE = "word_emb_layer.embedding.weight"


def their_key(allennlp_key: str) -> str:
    for pattern, name in _THEIR_NAMES:
        allennlp_key = re.sub(pattern, name, allennlp_key)
    return allennlp_key


def manylangs_rules(bilm: BiLM) -> tuple[list[Rule], list[Rule]]:
    """The conversions for token_embedder.pkl and for encoder.pkl, in the order their files list the keys."""
    token = [Rule(("char_encoder.word_embed",), (WORD_TABLE,), lambda t: (t,), lambda t: (t,))] if bilm.config.word_dim else []
    token += [dataclasses.replace(rule, theirs=tuple(map(their_key, rule.theirs)))
              for rule in token_embedder_rules(bilm, "", "")]
    return token, encoder_rules(bilm, "", "")


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """A torch-saved state_dict, loaded with weights_only=True (tensors only: no code runs on load)."""
    state = load_torch_file(path, "a torch state_dict of ELMoForManyLangs (names -> tensors)")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelFileError(f"{path}: expected a state_dict (names -> tensors), found {type(state).__name__}")
    return state


def _shape_hint(name: str, dictionaries: dict[str, Path]) -> str:
    """Where an expected shape comes from, for the tables sized by the dictionaries."""
    for prefix, dic in dictionaries.items():
        if name.startswith(prefix):
            return f"; its rows are the entries of {dic}: do the dictionaries and the weights belong together?"
    return "; does the architecture JSON belong to these weights?"


def check_state(path: Path, state: dict[str, torch.Tensor], expected: Shapes, dictionaries: dict[str, Path]) -> None:
    """Names and shapes must be exactly those the architecture and dictionaries call for."""
    missing = [name for name in expected if name not in state]
    if missing:
        raise ModelFileError(f"{path}: missing tensor '{missing[0]}' (expected shape {expected[missing[0]]})"
                             + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
                             + _shape_hint(missing[0], dictionaries))
    extra = sorted(set(state) - set(expected))
    if extra:
        raise ModelFileError(f"{path}: tensor '{extra[0]}' is not part of the model the architecture JSON describes"
                             + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""))
    for name, shape in expected.items():
        tensor = state[name]
        if tuple(tensor.shape) != shape:
            raise ModelFileError(f"{path}: tensor '{name}' has shape {tuple(tensor.shape)}, expected {shape}"
                                 + _shape_hint(name, dictionaries))
        if not tensor.is_floating_point() or not torch.isfinite(tensor).all():
            raise ModelFileError(f"{path}: tensor '{name}' must hold finite floats, found dtype {tensor.dtype}"
                                 + ("" if not tensor.is_floating_point() else " with NaN or infinite values"))


@torch.no_grad()
def load_weights(bilm: BiLM, token_file: Path, encoder_file: Path, dictionaries: dict[str, Path]) -> None:
    """Read both files, check them against the architecture and dictionaries, then copy them in.
    `dictionaries`: their table's key prefix ("char_emb_layer", "word_emb_layer") -> the .dic that sizes it."""
    params = dict(bilm.named_parameters())
    for path, rules in zip((token_file, encoder_file), manylangs_rules(bilm)):
        state = read_state_dict(path)
        expected = {name: tuple(shape) for name, shape in allennlp_shapes(rules, params).items()}
        check_state(path, state, expected, dictionaries)
        for rule in rules:
            for name, tensor in zip(rule.ours, rule.to_ours(*(state[t] for t in rule.theirs))):
                params[name].copy_(tensor)
