"""``python3 -m specdec_lab.contract [VERSION...]``: the vLLM contract for the pinned releases."""

import sys

from specdec_lab.contract.run import main

sys.exit(main())
