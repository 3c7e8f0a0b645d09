"""ELMo inside other frameworks: flair (`elmo.integrations.flair`), spaCy v3 (`elmo.integrations.spacy`, the
component; `elmo.integrations.spacy_layers`, the `elmo.ELMoEmbed.v1` architecture that trainable components use).

Nothing is imported here: each submodule imports its framework when it is imported itself, so
`import elmo` (and `import elmo.integrations`) never pulls in flair or spaCy (docs/integrations.md).

May import: elmo.allennlp, elmo_char_ids, elmo.embed, elmo.errors, elmo.files, elmo.formats, elmo.hub, elmo.model,
elmo.models, elmo.proteins, elmo.tf.
"""
