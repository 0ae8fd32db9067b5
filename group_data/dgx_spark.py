"""DGX Spark hosts: TensorRT-LLM (trtllm-serve, PyTorch backend) from NGC."""

specdec_device = "dgx-spark"
specdec_engine = "trtllm"
