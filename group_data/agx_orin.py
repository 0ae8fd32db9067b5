"""AGX Orin 64GB hosts: EAGLE-3 is worth it here (enough memory and bandwidth)."""

specdec_device = "agx-orin-64gb"
specdec_model = "meta-llama/Llama-3.1-8B-Instruct"
