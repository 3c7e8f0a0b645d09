"""Embedding: the `Embedder` (numpy vectors), long lines in windows, document context, and `elmo embed`'s
writers (stream.py: one stream; corpus.py: line-range parts, one process or many under torchrun), with the input
file (input_file.py) and the output's datasets (output_file.py) below both.

May import: elmo_char_ids, elmo.errors, elmo.files, elmo.formats, elmo.hub, elmo.model, elmo.models, elmo.tf.
"""
