#!/usr/bin/env python
"""Run the paper's downstream grid and write docs/results.md with its tables and PNG figures.

The command of the package beside it, scripts/results_grid/ (its docstring is this command's --help);
the lab notebook of what ran when is scripts/results_grid/notebook.json.
"""

from __future__ import annotations

import sys

from results_grid.cli import main

if __name__ == "__main__":
    sys.exit(main())
