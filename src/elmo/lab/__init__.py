"""`elmo lab`: the paper's demonstrations as a local web page, computed live by our own models.

`LabModels` holds what is computed with (biLM, optional LM softmax, taggers, mix presets, results),
`build_reference` embeds the real sentences neighbours come from, `create_app` serves both. The
web framework (Starlette) is an optional extra: `pip install "elmo-bilm[lab]"`.

May import: elmo_char_ids, elmo.embed, elmo.errors, elmo.files, elmo.formats, elmo.hub, elmo.model, elmo.models,
elmo.tasks, elmo.tf, elmo.training.
"""

from .lab_models import LabModels
from .reference import ReferenceSet, ReferenceSpec, build_reference

__all__ = ["LabModels", "ReferenceSet", "ReferenceSpec", "build_reference", "create_app"]


def create_app(*args, **kwargs):
    """See app.create_app; imported lazily so the rest works without the web extra."""
    from .app import create_app as make

    return make(*args, **kwargs)
