"""The gate: keep, disable or stay inconclusive from rounds of benchmark results under a
`GatePolicy`. `decide` (the decision and the next round's sizing), `observe` (what the gate reads
of a result), `estimators` (stratified per-arm estimates and their variance), `sequential` (the
group-sequential boundaries and sample sizes), `inputs` (policy and result files, checked),
`rounds` (what one round benchmarks per arm). Pure Python.

May import `config`, `plan.types` and `bench.prompts`."""
