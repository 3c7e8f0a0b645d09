"""The biLM and how it runs: options.json's settings, character ids, the char CNN and the LSTMs (bilm.py), their
matrix products (lstm_kernels.py, int8.py), the stateful mode, the token cache, ScalarMix, and the machine it runs
on (threads, devices, memory).

Plain torch; reads no weights file (that is elmo.formats).

May import: elmo_char_ids, elmo.errors, elmo.files.
"""
