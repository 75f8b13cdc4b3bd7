import sys

from reliability.cli import main

sys.exit(main())
