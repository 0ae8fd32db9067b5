"""Example DGX Spark fleet (addresses from the 192.0.2.0/24 documentation range).

    specdec plan inventories/spark.py
    pyinfra inventories/spark.py deploys/specdec.py

Both hosts follow NVIDIA's DGX Spark speculative-decoding playbook with trtllm-serve: gpt-oss-120b
with its EAGLE-3 head, and Llama-3.3-70B FP4 with the Llama-3.1-8B FP4 draft model.
"""

_ssh = {"ssh_user": "nvidia", "ssh_port": 22}

dgx_spark = [
    (
        "spark-01",
        {
            **_ssh,
            "ssh_hostname": "192.0.2.41",
            "specdec_model": "openai/gpt-oss-120b",
            "specdec_method": "eagle3",
        },
    ),
    (
        "spark-02",
        {
            **_ssh,
            "ssh_hostname": "192.0.2.42",
            "specdec_model": "nvidia/Llama-3.3-70B-Instruct-FP4",
            "specdec_method": "draft_model",
            "specdec_draft": "nvidia/Llama-3.1-8B-Instruct-FP4",
        },
    ),
]
