"""Fleet-wide specdec defaults (every host of every inventory run from this directory).

Only keys that do not change the memory budget belong here: a key set in data counts as pinned,
and a pinned value that does not fit is an error instead of a fallback.
"""

specdec_engine = "vllm"
specdec_runtime = "docker"
specdec_port = 8000
specdec_health_timeout = 900
specdec_jetson_tuning = True
