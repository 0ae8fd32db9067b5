"""`specdec watch`: is speculation still paying on the field's own traffic? Readers on the hosts
(`reader`, over `ssh`), samples and their sliding window (`window`), what the gate measured
(`gatefacts`), the estimate (`estimate`), verdicts (`verdict`), per host or group (`monitor`),
the loop (`run`), its outputs (`table`, `expose`, `store`, `livecols`) and the reverify marks
(`marks`)."""
