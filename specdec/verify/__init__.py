"""Verification of a freshly activated release, from the control node inside the deploy:
`verifier` (the flow, one screen), `spec` (what one verification is given: `VerifySpec`,
`HostIO`), `phases/` (health, process checks, bench, tune, gate, commit), `roofline` (the two
roofline figures), and serving groups verified as one: `members` (switched and waited for
together) and `group` (`verify_group`).

May import everything below it (`config` … `tune`), through a `HostIO`: never pyinfra."""
