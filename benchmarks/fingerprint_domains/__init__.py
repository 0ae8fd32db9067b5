"""The domains of `benchmarks/fingerprint.py`: each builds a deterministic set of cases, runs them
through the project's public entry points and returns canonical lines (one JSON object per case).

* `common`: canonical JSON, the per-domain collector, the parallel map.
* `adapters`: every private name the fingerprint reaches, in one place (adjust after a refactor).
* `plans`: plans (with baselines, tune-cache application, speculating), renders, inventories.
* `bench`: the benchmark clients' HTTP requests against a capturing loopback server.
* `engine`: the emulator's engine core step by step, and the emulator over HTTP.
* `decisions`: gate decisions, the tune's curve fits and search, fleet reports.
"""
