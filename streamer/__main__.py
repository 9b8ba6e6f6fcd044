"""``python -m streamer`` = the ``kdrsdl`` command."""

import sys

from streamer.cli import main

sys.exit(main())
