"""`python -m gateway`: the standalone gateway (gateway/standalone/cli.py)."""

import sys

from gateway.standalone.cli import main

if __name__ == "__main__":
    sys.exit(main())
