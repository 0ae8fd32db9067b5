"""Rolling a fleet out: `rollout` (batch by batch, canary first, driving the pyinfra CLI),
`batches` (Ansible-``serial`` sizes over deploy units, the failure rule), `resume` (what a run
left to do), `shard` (one fleet over N control nodes) and `store` (fleet state shared by
control nodes: a directory or etcd).

May import every package below it (`config` … `watch`), not the pyinfra layer or the CLI."""
