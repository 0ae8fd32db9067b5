"""Contract tests against the real engines: what specdec renders, judged by each pinned release.

vLLM: each pinned release is installed from PyPI into its own environment outside the repository
(`installer`, lock files in ``locks/``, derived by `lockgen`); `vllm_check` runs inside it and
puts every rendered ``vllm serve`` argv (`cases`) and every control (`controls`) through the
release's own CLI parser, EngineArgs, ModelConfig and SpeculativeConfig, with config.json files
made from the catalog (`models`); `verdict` compares what it says with the plans and with the
fact tables in `specdec.engines.vllm.facts`. TensorRT-LLM's PyPI package is a download stub, so its
``engine.yaml`` files are checked against the schema facts copied from its source
(`trtllm_schema`, `specdec.engines.trtllm.facts`).
"""
