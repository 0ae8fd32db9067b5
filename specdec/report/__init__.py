"""Reports on the control node: per-host JSON and the fleet's Markdown and HTML (`fleet`), the
cells the tables share (`cells`), serving groups in the report (`groups`), the shards of one run
merged (`merge`), and the live columns read from ``specdec watch``'s file (`livecols`).

May import `config`, `engines`, `plan.types`, `tune` (its chart) and `verify` (its roofline)."""
