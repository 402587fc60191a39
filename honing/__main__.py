"""``python -m honing`` (what torchrun launches) runs the CLI."""

import sys

from honing.cli import main

sys.exit(main())
