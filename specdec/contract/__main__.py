"""``python3 -m specdec.contract [VERSION...]``: the vLLM contract for the pinned releases."""

import sys

from specdec.contract.run import main

sys.exit(main())
