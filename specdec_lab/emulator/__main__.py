"""``python3 -m specdec_lab.emulator vllm serve MODEL ...`` / ``... trtllm-serve MODEL ...``."""

import sys

from specdec_lab.emulator.launch import run

sys.exit(run(sys.argv[1:]))
