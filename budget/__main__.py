import sys

from budget.cli import main

sys.exit(main())
