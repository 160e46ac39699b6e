import sys

from depgpo.cli import main

sys.exit(main())
