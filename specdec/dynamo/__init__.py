"""NVIDIA Dynamo serving groups: several hosts behind one Dynamo frontend.

* `group` — groups from the inventory (``specdec_group``, ``specdec_group_frontend``), member
  addresses, whole-group ``--limit`` checks, and the plans a group's members must share;
* `plan` — a host's part in its group (`specdec.plan_types.DynamoPlan`);
* `render` — the worker, frontend and etcd units;
* `groupverify` — health, benchmark and gate of the whole group through its frontend, commit on
  every member or restore last-good on every member.
"""
