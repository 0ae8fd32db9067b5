"""Serving groups: several hosts that serve one model behind one endpoint and deploy, verify,
commit and roll back as one. `inventory`: the groups of an inventory and what their members
must share; `members`: a group's members, reached through each one's `HostIO`; `verify`: the
group's verification through its endpoint. What differs per engine (where the endpoint and each
member answer, how readiness counts workers) is the engine's `GroupSeat`."""
