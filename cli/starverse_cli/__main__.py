"""`python -m starverse_cli`, the same as the installed `starverse` command."""

import sys

from starverse_cli.main import main

sys.exit(main())
