"""Files on disk, safely: atomic writes and the one rule for every output path, the one line reader, torch-saved
files read without running code, HDF5 opened only when it holds its own data, the names inside a model directory.

The bottom of the package: nothing here knows what a biLM is.

May import: elmo.errors.
"""
