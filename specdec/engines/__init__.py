"""Engine versions as data: what each pinned vLLM / TensorRT-LLM / Dynamo release accepts, with
sources.

`support` answers whether a release runs a speculative method for a target; `vllm_facts` and
`trtllm_facts` hold the details the renderer and the engine emulator need. Pure Python, no
third-party imports (the emulator ships this package into the lab images).
"""

from specdec.engines.dynamo import DynamoFacts, dynamo_facts
from specdec.engines.support import Support, Target, support
from specdec.engines.trtllm import TrtllmFacts, trtllm_facts
from specdec.engines.version import Version, version_in_tag
from specdec.engines.vllm import VllmFacts, vllm_facts

__all__ = [
    "DynamoFacts",
    "Support",
    "Target",
    "TrtllmFacts",
    "Version",
    "VllmFacts",
    "dynamo_facts",
    "support",
    "trtllm_facts",
    "version_in_tag",
    "vllm_facts",
]
