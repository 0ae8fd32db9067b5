"""``python3 -m specdec.emulator vllm serve MODEL ...`` / ``... trtllm-serve MODEL ...``."""

import sys

from specdec.emulator.launch import run

sys.exit(run(sys.argv[1:]))
