"""Model files, both ways: weights.hdf5 <-> BiLM, the LM vocabulary, AllenNLP's state_dict, ELMoForManyLangs and
NLPL directories, fingerprints, the verified int8 store, and the ONNX export.

Local files only: fetching by name or URL is elmo.hub, choosing a reader is elmo.models.

May import: elmo_char_ids, elmo.errors, elmo.files, elmo.model.
"""
