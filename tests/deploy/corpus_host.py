"""The bad-input corpus, part 1 (issue 10): host names, every value that reaches a unit or
YAML, repo ids, managed flags and secrets, reserved environment, numbers, the token, images."""

from __future__ import annotations

from specdec.engines.vllm.facts import RELEASES as VLLM_RELEASES
from tests.deploy.corpus_base import (
    CTRL,
    IMAGE_RULE,
    MEMLOCK,
    NO_FILE,
    NOT_HF,
    NOT_SINGLE,
    REPO_RULE,
    RESERVED,
    SECRET,
    SECRET_FLAG,
    TOK,
    TRT,
    Case,
    H,
    _host_case,
    _managed,
)

CASES: dict[str, Case] = {
    # 1. Host names (they reach unit comments, engine.yaml, file names and reports).
    "host-newline": _host_case("@fake/bad\nExecStartPre=+/bin/sh -c id",
                               "'@fake/bad\\nExecStartPre=+/bin/sh -c id'"),
    "host-u2028": _host_case("@fake/bad\u2028x", "'@fake/bad\\u2028x'"),
    "host-nel": _host_case("@fake/bad\x85x", "'@fake/bad\\x85x'"),
    "host-vt": _host_case("@fake/bad\x0bx", "'@fake/bad\\x0bx'"),
    "host-fs": _host_case("@fake/bad\x1cx", "'@fake/bad\\x1cx'"),
    "host-space": _host_case("@fake/bad host", "'@fake/bad host'"),
    "host-dash": _host_case("@fake/-bad", "'@fake/-bad'"),
    "host-long": _host_case("@fake/" + "a" * 64, "'@fake/" + "a" * 53 + "… (70 chars)"),
    "host-unicode": _host_case("@fake/héllo", "'@fake/héllo'"),
    "host-percent": _host_case("@fake/50%off", "'@fake/50%off'"),
    "host-slash": _host_case("@fake/a/b", "'@fake/a/b'"),
    "host-bidi": _host_case("@fake/bad\u202ename", "'@fake/bad\\u202ename'"),
    "host-dot": _host_case("@fake/.hidden", "'@fake/.hidden'"),
    "host-underscore": _host_case("@fake/_x", "'@fake/_x'"),
    # 1. Every value reaching a unit or YAML: every str.splitlines() break, every control char.
    "device-u2028": Case(f"{H}specdec_device='agx-orin-64gb\\u2028x: 1': {CTRL} (U+2028)",
                         {"specdec_device": "agx-orin-64gb\u2028x: 1"}),
    "tokenizer-nel": Case(f"{H}specdec_model_tokenizer='qwen3\\x85evil: 1': {CTRL} (U+0085)",
                          {"specdec_model_tokenizer": "qwen3\x85evil: 1"}),
    "user-newline": Case(
        f"{H}specdec_service_user='specdec\\nExecStartPre=+/bin/sh': {CTRL} (U+000A)",
        {"specdec_service_user": "specdec\nExecStartPre=+/bin/sh"}),
    "method-vt": Case(f"{H}specdec_method='ngram\\x0b': {CTRL} (U+000B)",
                      {"specdec_method": "ngram\x0b"}),
    "engine-space": Case(f"{H}specdec_engine=' vllm': must not have surrounding whitespace",
                         {"specdec_engine": " vllm"}),
    "tokenfile-newline": Case(f"{H}specdec_hf_token_file='/tmp/t\\n': {CTRL} (U+000A)",
                              {"specdec_hf_token_file": "/tmp/t\n"}),
    # 2. Model and draft ids: the Hub's grammar.
    "model-flag": Case(f"{H}specdec_model='--trust-remote-code': {REPO_RULE}",
                       {"specdec_model": "--trust-remote-code"}),
    "model-dotdot": Case(f"{H}specdec_model='../../etc': {REPO_RULE}",
                         {"specdec_model": "../../etc"}),
    "model-space": Case(f"{H}specdec_model='Qwen/Qwen3 0.6B': {REPO_RULE}",
                        {"specdec_model": "Qwen/Qwen3 0.6B"}),
    "model-bidi": Case(f"{H}specdec_model='Qwen/\\u202eQwen3': {CTRL} (U+202E)",
                       {"specdec_model": "Qwen/\u202eQwen3"}),
    "model-2mib": Case(f"{H}specdec_model='{'a' * 59}… (2097152 chars): is 2097152 characters "
                       "long (at most 193)", {"specdec_model": "a" * 2_097_152}),
    "model-git": Case(f"{H}specdec_model='Qwen/Qwen3.git': {REPO_RULE}",
                      {"specdec_model": "Qwen/Qwen3.git"}),
    "model-dashdash": Case(f"{H}specdec_model='Qwen--x/Qwen3': {REPO_RULE}",
                           {"specdec_model": "Qwen--x/Qwen3"}),
    "model-3parts": Case(f"{H}specdec_model='datasets/Qwen/Qwen3': {REPO_RULE}",
                         {"specdec_model": "datasets/Qwen/Qwen3"}),
    "model-empty": Case(f"{H}specdec_model='': must be a non-empty string", {"specdec_model": ""}),
    "model-int": Case(f"{H}specdec_model=5: must be a string", {"specdec_model": 5}),
    "model-newline": Case(f"{H}specdec_model='Qwen/Qwen3\\nExecStartPre=+/bin/sh': {CTRL} "
                          "(U+000A)", {"specdec_model": "Qwen/Qwen3\nExecStartPre=+/bin/sh"}),
    "model-token": Case(f"{H}specdec_model='<redacted>': {SECRET}", {"specdec_model": TOK}),
    "draft-flag": Case(f"{H}specdec_draft='--trust-remote-code': {REPO_RULE}",
                       {"specdec_draft": "--trust-remote-code"}),
    "draft-path": Case(f"{H}specdec_draft='/etc/passwd': {REPO_RULE}",
                       {"specdec_draft": "/etc/passwd"}),
    "draft-u2029": Case(f"{H}specdec_draft='Qwen/Qwen3\\u2029x': {CTRL} (U+2029)",
                        {"specdec_draft": "Qwen/Qwen3\u2029x"}),
    # 3. vLLM's managed flags, in both spellings, with "=", dotted, abbreviated; secrets.
    "vllm-port": _managed(["--port", "9000"], "'--port'",
                          "--port is managed by specdec (use specdec_port)"),
    "vllm-port-eq": _managed(["--port=9000"], "'--port=9000'",
                             "--port is managed by specdec (use specdec_port)"),
    "vllm-host": _managed(["--host", "127.0.0.1"], "'--host'",
                          "--host is managed by specdec (the engine listens on 127.0.0.1, "
                          "behind specdec's API proxy; use specdec_listen)"),
    "vllm-served": _managed(["--served-model-name", "x"], "'--served-model-name'",
                            "--served-model-name is managed by specdec (specdec serves the "
                            "model under its id)"),
    "vllm-served-us-eq": _managed(["--served_model_name=x"], "'--served_model_name=x'",
                                  "--served-model-name is managed by specdec (specdec serves "
                                  "the model under its id)"),
    "vllm-mml-us": _managed(["--max_model_len", "4"], "'--max_model_len'",
                            "--max-model-len is managed by specdec (use specdec_max_model_len)"),
    "vllm-mml-abbrev": _managed(["--max-model", "4"], "'--max-model'",
                                "--max-model-len is managed by specdec (use "
                                "specdec_max_model_len)"),
    "vllm-gmu-eq": _managed(["--gpu-memory-utilization=0.99"], "'--gpu-memory-utilization=0.99'",
                            "--gpu-memory-utilization is managed by specdec (use "
                            "specdec_gpu_memory_utilization)"),
    "vllm-seqs": _managed(["--max-num-seqs", "999"], "'--max-num-seqs'",
                          "--max-num-seqs is managed by specdec (use specdec_max_num_seqs)"),
    "vllm-spec": _managed(["--speculative-config", "{}"], "'--speculative-config'",
                          "--speculative-config is managed by specdec (use specdec_method, "
                          "specdec_draft, specdec_num_speculative_tokens)"),
    "vllm-spec-dotted": _managed(["--speculative_config.method=ngram"],
                                 "'--speculative_config.method=ngram'",
                                 "--speculative-config is managed by specdec (use "
                                 "specdec_method, specdec_draft, specdec_num_speculative_tokens)"),
    "vllm-model": _managed(["--model", "x"], "'--model'",
                           "--model is managed by specdec (use specdec_model)"),
    "vllm-config": _managed(["--config", "/tmp/x.yaml"], "'--config'",
                            "--config is managed by specdec (a config file could set managed "
                            "flags)"),
    "vllm-hf-token": _managed(["--hf-token", "x"], "'--hf-token'", f"--hf-token {SECRET_FLAG}"),
    "vllm-hf_token-eq": _managed(["--hf_token=abc"], "'--hf_token=abc'",
                                 f"--hf-token {SECRET_FLAG}"),
    "vllm-hf_token-token": _managed([f"--hf_token={TOK}"], "'--hf_token=<redacted>'", SECRET),
    "vllm-api-key": _managed(["--api_key=k"], "'--api_key=k'", f"--api-key {SECRET_FLAG}"),
    "vllm-token": _managed(["--token", "t"], "'--token'", f"--token {SECRET_FLAG}"),
    "vllm-hf-tok-abbrev": _managed(["--hf-tok=x"], "'--hf-tok=x'", f"--hf-token {SECRET_FLAG}"),
    "arg-token-shaped": Case(f"{H}specdec_extra_args[1]='<redacted>': {SECRET}",
                             {"specdec_extra_args": ["--enforce-eager", TOK]}),
    "arg-newline": _managed(["--foo\nExecStartPre=+/bin/sh"],
                            "'--foo\\nExecStartPre=+/bin/sh'", f"{CTRL} (U+000A)"),
    "arg-u2028": _managed(["--foo\u2028bar"], "'--foo\\u2028bar'", f"{CTRL} (U+2028)"),
    "arg-empty": _managed([""], "''", "must be a non-empty string"),
    "arg-long": _managed(["x" * 1025], f"'{'x' * 59}… (1025 chars)",
                         "is 1025 characters long (at most 1024)"),
    "args-many": Case(f"{H}specdec_extra_args=['--enforce-eager', '--enforce-eager', "
                      "'--enforce-eager', '-…: has 65 items (at most 64)",
                      {"specdec_extra_args": ["--enforce-eager"] * 65}),
    "args-str": Case(f"{H}specdec_extra_args='--enforce-eager': must be a list of strings",
                     {"specdec_extra_args": "--enforce-eager"}),
    "arg-int": _managed([3], "3", "must be a string"),
    # 3. trtllm-serve's managed flags (click: exact names, --name=value; alias --config).
    "trt-extra": _managed(["--extra_llm_api_options", "/tmp/x.yaml"], "'--extra_llm_api_options'",
                          "--extra_llm_api_options is managed by specdec (specdec writes "
                          "engine.yaml)", TRT),
    "trt-config-eq": _managed(["--config=/tmp/x.yaml"], "'--config=/tmp/x.yaml'",
                              "--config is managed by specdec (specdec writes engine.yaml)", TRT),
    "trt-port": _managed(["--port", "1"], "'--port'",
                         "--port is managed by specdec (use specdec_port)", TRT),
    "trt-batch": _managed(["--max_batch_size", "4"], "'--max_batch_size'",
                          "--max_batch_size is managed by specdec (use specdec_max_num_seqs)",
                          TRT),
    "trt-kv-eq": _managed(["--kv_cache_free_gpu_memory_fraction=0.9"],
                          "'--kv_cache_free_gpu_memory_fraction=0.9'",
                          "--kv_cache_free_gpu_memory_fraction is managed by specdec (use "
                          "specdec_gpu_memory_utilization)", TRT),
    "trt-free": _managed(["--free_gpu_memory_fraction", "0.5"], "'--free_gpu_memory_fraction'",
                         "--free_gpu_memory_fraction is managed by specdec (use "
                         "specdec_gpu_memory_utilization)", TRT),
    "trt-backend": _managed(["--backend", "tensorrt"], "'--backend'",
                            "--backend is managed by specdec (specdec runs the pytorch backend)",
                            TRT),
    "trt-seq-eq": _managed(["--max_seq_len=99"], "'--max_seq_len=99'",
                           "--max_seq_len is managed by specdec (use specdec_max_model_len)", TRT),
    # 3. Reserved environment names; values.
    "env-offline": Case(f"{H}specdec_env.HF_HUB_OFFLINE='0': HF_HUB_OFFLINE {RESERVED}",
                        {"specdec_env": {"HF_HUB_OFFLINE": "0"}}),
    "env-endpoint": Case(f"{H}specdec_env.HF_ENDPOINT='https://evil.example': HF_ENDPOINT "
                         f"{RESERVED}", {"specdec_env": {"HF_ENDPOINT": "https://evil.example"}}),
    "env-hf-home": Case(f"{H}specdec_env.HF_HOME='/tmp': HF_HOME {RESERVED}",
                        {"specdec_env": {"HF_HOME": "/tmp"}}),
    "env-ld-preload": Case(f"{H}specdec_env.LD_PRELOAD='/tmp/x.so': LD_PRELOAD {RESERVED}",
                           {"specdec_env": {"LD_PRELOAD": "/tmp/x.so"}}),
    "env-path": Case(f"{H}specdec_env.PATH='/tmp': PATH {RESERVED}",
                     {"specdec_env": {"PATH": "/tmp"}}),
    "env-pythonpath": Case(f"{H}specdec_env.PYTHONPATH='/tmp': PYTHONPATH {RESERVED}",
                           {"specdec_env": {"PYTHONPATH": "/tmp"}}),
    "env-lowercase-hf": Case(f"{H}specdec_env.hf_endpoint='x': hf_endpoint {RESERVED}",
                             {"specdec_env": {"hf_endpoint": "x"}}),
    "env-hub-token": Case(f"{H}specdec_env.HUGGING_FACE_HUB_TOKEN: looks like a secret (contains "
                          "TOKEN); secrets do not belong in host data (the HF token goes to "
                          "specdec_hf_token_file)",
                          {"specdec_env": {"HUGGING_FACE_HUB_TOKEN": TOK}}),
    "env-value-newline": Case(f"{H}specdec_env.A='x\\nExecStartPre=+/bin/sh': {CTRL} (U+000A)",
                              {"specdec_env": {"A": "x\nExecStartPre=+/bin/sh"}}),
    "env-value-u2029": Case(f"{H}specdec_env.A='x\\u2029y': {CTRL} (U+2029)",
                            {"specdec_env": {"A": "x\u2029y"}}),
    "env-value-token": Case(f"{H}specdec_env.A='<redacted>': {SECRET}",
                            {"specdec_env": {"A": TOK}}),
    "env-name-bad": Case(f"{H}specdec_env: name 'A B' is not a valid environment variable name",
                         {"specdec_env": {"A B": "x"}}),
    "env-name-newline": Case(f"{H}specdec_env: name 'A\\nB' is not a valid environment variable "
                             "name", {"specdec_env": {"A\nB": "x"}}),
    "env-value-long": Case(f"{H}specdec_env.A='{'x' * 59}… (1025 chars): is 1025 characters long "
                           "(at most 1024)", {"specdec_env": {"A": "x" * 1025}}),
    "env-many": Case(f"{H}specdec_env={{'V0': 'x', 'V1': 'x', 'V2': 'x', 'V3': 'x', 'V4': 'x', "
                     "'V5'…: has 65 items (at most 64)",
                     {"specdec_env": {f"V{i}": "x" for i in range(65)}}),
    # 4. Numbers: finite and in range; lengths capped.
    "memlock-huge": Case(f"{H}specdec_memlock={10**30}: {MEMLOCK}", {"specdec_memlock": 10**30}),
    "memlock-superscript": Case(f"{H}specdec_memlock='²': {MEMLOCK}", {"specdec_memlock": "²"}),
    "memlock-negative": Case(f"{H}specdec_memlock=-1: {MEMLOCK}", {"specdec_memlock": -1}),
    "memlock-tiny": Case(f"{H}specdec_memlock=1024: {MEMLOCK}", {"specdec_memlock": 1024}),
    "memlock-float": Case(f"{H}specdec_memlock=1500000000.0: {MEMLOCK}",
                          {"specdec_memlock": 1.5e9}),
    "memlock-suffix": Case(f"{H}specdec_memlock='8M': {MEMLOCK}", {"specdec_memlock": "8M"}),
    "params-inf": Case(f"{H}specdec_model_params_b=inf: must be a finite number in (0, 2000]",
                       {"specdec_model_params_b": float("inf")}),
    "params-nan": Case(f"{H}specdec_model_params_b=nan: must be a finite number in (0, 2000]",
                       {"specdec_model_params_b": float("nan")}),
    "params-huge": Case(f"{H}specdec_model_params_b=1000000000.0: must be a finite number in "
                        "(0, 2000]", {"specdec_model_params_b": 1e9}),
    "weight-inf": Case(f"{H}specdec_model_weight_gib=inf: must be a finite number in (0, 4096]",
                       {"specdec_model_weight_gib": float("inf")}),
    "util-nan": Case(f"{H}specdec_gpu_memory_utilization=nan: must be a finite number in (0, 1)",
                     {"specdec_gpu_memory_utilization": float("nan")}),
    "kv-huge": Case(f"{H}specdec_model_kv_bytes_per_token=33554432: must be an integer in "
                    "1..16777216", {"specdec_model_kv_bytes_per_token": 2**25}),
    "mml-huge": Case(f"{H}specdec_max_model_len=1073741824: must be an integer in 128..16777216",
                     {"specdec_max_model_len": 2**30}),
    "port-huge": Case(f"{H}specdec_port={2**70}: must be an integer in 1024..65535",
                      {"specdec_port": 2**70}),
    "gate-inf": Case(f"{H}specdec_gate.keep_min_throughput_gain=inf: must be a finite number in "
                     "(-1, 10)", {"specdec_gate": {"keep_min_throughput_gain": float("inf")}}),
    "bench-mode": Case(f"{H}specdec_bench_mode='remote': must be one of host, image, control",
                       {"specdec_bench_mode": "remote"}),
    "bench-mode-image-native": Case(f"{H}specdec_bench_mode='image': the native runtime has no "
                                    "engine image; use host or control",
                                    {"specdec_bench_mode": "image",
                                     "specdec_runtime": "native"}),
    # an engine release the facts do not know (vLLM's on PyPI end at 0.33.0)
    "engine-version-unreleased": Case(
        f"{H}specdec_image='vllm/vllm-openai:v0.34.0': vLLM 0.34.0 is newer than 0.33.0, the "
        f"newest release specdec's facts cover (known: {', '.join(VLLM_RELEASES)})",
        {"specdec_image": "vllm/vllm-openai:v0.34.0"}),
    "gate-rounds": Case(f"{H}specdec_gate.max_rounds=1000000000: must be an integer in 1..1024",
                        {"specdec_gate": {"max_rounds": 10**9}}),
    "gate-confidence-nan": Case(f"{H}specdec_gate.confidence=nan: must be a finite number in "
                                "(0, 1)", {"specdec_gate": {"confidence": float("nan")}}),
    "device-long": Case(f"{H}specdec_device='{'x' * 59}… (129 chars): is 129 characters long (at "
                        "most 128)", {"specdec_device": "x" * 129}),
    "tokenfile-long": Case(f"{H}specdec_hf_token_file='/{'a' * 58}… (4097 chars): is 4097 "
                           "characters long (at most 4096)",
                           {"specdec_hf_token_file": "/" + "a" * 4096}),
    # 6. The token: one validator for $HF_TOKEN and the file; never echoed.
    "token-env-inner-newline": Case(f"{H}$HF_TOKEN: {NOT_SINGLE}",
                                    env_token="hf_" + "A" * 24 + "\nevil"),
    "token-env-inner-space": Case(f"{H}$HF_TOKEN: {NOT_SINGLE}",
                                  env_token="hf_" + "A" * 12 + " " + "B" * 12),
    "token-env-u2028": Case(f"{H}$HF_TOKEN: {NOT_SINGLE}", env_token="hf_" + "A" * 24 + "\u2028B"),
    "token-env-short": Case(f"{H}$HF_TOKEN: {NOT_HF}", env_token="hf_short"),
    "token-env-not-hf": Case(f"{H}$HF_TOKEN: {NOT_HF}", env_token="ghp_" + "A" * 36),
    "token-file-two-lines": Case(f"{H}specdec_hf_token_file='{{path}}': {NOT_SINGLE}",
                                 file_token=f"{TOK}\n{TOK}\n".encode()),
    "token-file-empty": Case(f"{H}specdec_hf_token_file='{{path}}': is empty (no token)",
                             file_token=b"\n"),
    "token-file-binary": Case(f"{H}specdec_hf_token_file='{{path}}': is not UTF-8 text",
                              file_token=b"\xff\xfe" + b"A" * 30),
    "token-file-big": Case(f"{H}specdec_hf_token_file='{{path}}': is larger than 4096 bytes (not "
                           "a token file)", file_token=b"hf_" + b"A" * 5000),
    "token-file-missing": Case(f"{H}specdec_hf_token_file='{NO_FILE}': cannot read (No such file "
                               "or directory)", {"specdec_hf_token_file": NO_FILE},
                               reads_token=True),
    "token-file-is-token": Case(f"{H}specdec_hf_token_file=<redacted>: must be a path to a file "
                                "holding the token (on the control node), not the token itself",
                                {"specdec_hf_token_file": TOK}),
    "unknown-secret-key": Case(f"{H}unknown key specdec_api_token=<redacted>",
                               {"specdec_api_token": TOK}),
    # 7. Image references: Docker's grammar, pinned.
    "image-dash-registry": Case(f"{H}specdec_image='-eX/vllm:1': {IMAGE_RULE}",
                                {"specdec_image": "-eX/vllm:1"}),
    "image-dash-path": Case(f"{H}specdec_image='localhost:5000/-x/vllm:1': {IMAGE_RULE}",
                            {"specdec_image": "localhost:5000/-x/vllm:1"}),
    "image-latest": Case(f"{H}specdec_image='vllm/vllm-openai:latest': ':latest' is a moving tag, "
                         "not pinned; use a version tag or @sha256 digest",
                         {"specdec_image": "vllm/vllm-openai:latest"}),
    "image-unpinned": Case(f"{H}specdec_image='nvcr.io/nvidia/vllm': image is not pinned; use "
                           "repo:tag or repo@sha256:<digest>",
                           {"specdec_image": "nvcr.io/nvidia/vllm"}),
    "image-uppercase-path": Case(f"{H}specdec_image='nvidia/Vllm:1': {IMAGE_RULE}",
                                 {"specdec_image": "nvidia/Vllm:1"}),
    "image-option": Case(f"{H}specdec_image='vllm:1 --privileged': {IMAGE_RULE}",
                         {"specdec_image": "vllm:1 --privileged"}),
    "image-newline": Case(f"{H}specdec_image='vllm:1\\nExecStartPre=+/bin/sh': {CTRL} (U+000A)",
                          {"specdec_image": "vllm:1\nExecStartPre=+/bin/sh"}),
    "image-short-digest": Case(f"{H}specdec_image='reg.io/a/b@sha256:abc': {IMAGE_RULE}",
                               {"specdec_image": "reg.io/a/b@sha256:abc"}),
    "image-md5": Case(f"{H}specdec_image='reg.io/a/b@md5:{'0' * 32}': pin a sha256 digest "
                      "(sha256: and 64 lowercase hex digits)",
                      {"specdec_image": "reg.io/a/b@md5:" + "0" * 32}),
    "image-tag-dash": Case(f"{H}specdec_image='vllm:-1': {IMAGE_RULE}",
                           {"specdec_image": "vllm:-1"}),
    "image-long-name": Case(f"{H}specdec_image='{'a' * 59}… (258 chars): image name is longer "
                            "than 255", {"specdec_image": "a" * 256 + ":1"}),
    "image-too-long": Case(f"{H}specdec_image='{'a/' * 29}a… (603 chars): is 603 characters long "
                           "(at most 512)", {"specdec_image": "a/" * 300 + "b:1"}),
}
