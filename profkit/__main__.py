import sys

from profkit.cli import main

sys.exit(main())
