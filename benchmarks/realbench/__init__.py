"""Helpers of `benchmarks/real_engine.py`: the engines it starts (`engine`), generated prompts
(`prompts`) and one module per section (`clients`, `emulated`, `watchcheck`)."""
