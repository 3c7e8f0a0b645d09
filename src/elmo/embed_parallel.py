"""The former name of `elmo.embed_corpus` (every `elmo embed`, one process or many under torchrun).

`import elmo.embed_parallel` gives that very module, so code written for the old name, including code
that sets its attributes, keeps working.
"""

import sys

from . import embed_corpus

sys.modules[__name__] = embed_corpus
