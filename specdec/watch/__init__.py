"""`specdec watch`: is speculation still paying on the field's own traffic? Readers on the hosts
(`reader`, over `ssh`), samples and their sliding window (`window`), what the gate measured
(`gatefacts`), the estimate (`estimate`), verdicts (`verdict`), per host or group (`monitor`),
the loop (`run`), its outputs (`table`, `expose`, `store`; the fleet page's live columns are
`specdec.report.livecols`) and the reverify marks (`marks`).

May import every package below it (`config` … `report`); the on-host `reader` imports nothing
(it is shipped as text and run by the host's python3)."""
