"""`python -m voltstream.cli`: the same as the `voltstream` command."""

import sys

from voltstream.cli import main

sys.exit(main())
