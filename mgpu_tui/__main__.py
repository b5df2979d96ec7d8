import sys

from mgpu_tui.cli import main

sys.exit(main())
