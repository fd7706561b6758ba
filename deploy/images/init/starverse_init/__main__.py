import sys

from starverse_init.main import main

sys.exit(main())
