"""Orin Nano 8GB hosts: 1B-class models; the planner falls back to n-gram speculation."""

specdec_device = "orin-nano-8gb"
specdec_model = "meta-llama/Llama-3.2-1B-Instruct"
