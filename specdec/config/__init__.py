"""Configuration on the control node, and the vocabulary every package reads it with: the
inventory loader (`inventory`), one ``specdec_*`` key read and checked (`keys`), a host's
validated settings (`settings`, filled by `specdec.plan.hostdata`), every single-value input
check (`hygiene`; addresses beyond their syntax in `endpoints`; numbers, option values and
the operator's small files in `rawinput`), user YAML/JSON files (`yamlfile`), what the control
node reads back from hosts and stores (`readback`), and the control node's secrets: the HF
token (`hftoken`), the API key (`apikey`) and the certificate authority (`pki`).

May import `specdec.errors`, `specdec.plan.types` and `specdec.host.layout` only (the shared
vocabulary); everything else imports it."""
