"""``python -m lab``: the command line lives in :mod:`lab.cli`."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
