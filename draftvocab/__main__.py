import sys

from draftvocab.cli import main

sys.exit(main())
