"""The plan: one immutable, typed value per host, computed before any host changes.

`types` is the plan's vocabulary (`Plan`, `GatePolicy`, `Group`, …: imports nothing of
specdec). The planner: `hostdata` (a host's ``specdec_*`` data -> `HostSettings`, every key
checked), `planner` (catalog + settings + identity -> `Plan`; `baseline`, `speculating`),
`image` (the image and engine release), `method` (speculative method, draft, starting k),
`memory` (the memory budget), `sites` (site mirrors, Hub endpoints), `sockets` (every socket a
host opens), `groups` (serving groups of the inventory), `packages` (distribution packages).

May import `config`, `catalog`, `host`, `engines` and `gate` (its policy checks); never
render, tune, verify or anything above."""
