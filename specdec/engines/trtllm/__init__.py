"""TensorRT-LLM (``trtllm-serve``, PyTorch backend): `facts` (what each release accepts, with
sources), `engine` (`TrtllmEngine`: argv, ``engine.yaml``, tiktoken, readiness) and `metrics`
(its iteration stats for `specdec watch`). May import as `specdec.engines` says."""
