"""Orin NX 16GB hosts: Llama-3.2-3B with the 1B draft model.

Target + draft + overhead is ~9.2 GiB, more than the catalog's 0.55 speculative fraction of 16 GiB,
so the fraction is pinned to 0.70 (4.8 GiB left to the OS).
"""

specdec_device = "orin-nx-16gb"
specdec_model = "meta-llama/Llama-3.2-3B-Instruct"
specdec_gpu_memory_utilization = 0.70
