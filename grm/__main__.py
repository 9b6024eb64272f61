import sys

from grm.cli import main

sys.exit(main())
