"""Example Jetson Orin fleet (addresses from the 192.0.2.0/24 documentation range).

    specdec plan inventories/jetsons.py
    pyinfra inventories/jetsons.py deploys/specdec.py

Each list is a pyinfra group; group_data/<group>.py holds that group's specdec_* defaults and
group_data/all.py the fleet-wide ones. Host data here wins over both.
"""

_ssh = {"ssh_user": "nvidia", "ssh_port": 22}

# AGX Orin 64GB: Llama-3.1-8B-Instruct with its EAGLE-3 head (chosen by the planner).
agx_orin = [
    ("agx-orin-01", {**_ssh, "ssh_hostname": "192.0.2.11"}),
]

# Orin NX 16GB: Llama-3.2-3B-Instruct, Llama-3.2-1B-Instruct as draft model.
orin_nx = [
    ("orin-nx-01", {**_ssh, "ssh_hostname": "192.0.2.21"}),
]

# Orin Nano 8GB: small models only; n-gram (prompt lookup) needs no extra weights.
orin_nano = [
    ("orin-nano-01", {**_ssh, "ssh_hostname": "192.0.2.31"}),
    (
        "orin-nano-02",
        {**_ssh, "ssh_hostname": "192.0.2.32", "specdec_model": "Qwen/Qwen3-0.6B"},
    ),
]
