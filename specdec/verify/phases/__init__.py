"""The phases of `specdec.verify.verifier.Verifier`, one small unit each.

* `host` — the shared state of one verification (`Ctx`: what runs, what is last-good, the
  report) and its primitives on the host (shell commands, switching releases, the guard);
* `health` — wait until the engine serves the plan's model (unit state, ``/health``,
  ``/v1/models``), recognising crashes and OOM from the journal;
* `process` — the engine process's memlock limit, and no HF token in its argv or environment;
* `bench` — benchmark one arm (a release) for one round, the baseline cache, per-arm figures;
* `tune` — search k (and the method) on the host (`specdec.tune.search`), render the chosen release;
* `gate` — the gate's rounds (`specdec.gate.decide`) until it answers;
* `commit` — keep, disable, hold, or restore last-good after a failure.
"""
