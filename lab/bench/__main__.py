"""``python -m lab.bench``: the same as ``python -m lab bench`` (see ``lab.cli.bench``)."""
import sys

from ..cli.bench import main

if __name__ == "__main__":
    sys.exit(main())
