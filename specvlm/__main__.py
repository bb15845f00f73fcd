"""``python -m specvlm generate|bench ...``: see :mod:`specvlm.cli`."""
import sys

from specvlm.cli import main

if __name__ == "__main__":
    sys.exit(main())
