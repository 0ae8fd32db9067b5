"""``python3 -m specdec.bench.onhost``: the on-host client's command line (`cli.main`). The
zipapp (`specdec.bench.remote.pyz`) has its own ``__main__.py`` at its root, which runs the same."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
