"""AllenNLP's faces on this package's biLM: `Elmo` (allennlp.modules.elmo's module, its state_dict included)
and AllenNLP 0.9's `ElmoEmbedder` (allennlp.commands.elmo), so code written for them runs unchanged.

May import: elmo_char_ids, elmo.embed, elmo.errors, elmo.files, elmo.formats, elmo.hub, elmo.model, elmo.models, elmo.tf.
"""
