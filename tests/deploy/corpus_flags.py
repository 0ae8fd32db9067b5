"""The bad-input corpus, part 5 (issue 29): the serving keys' numbers and words, engine flags
that load code or open listeners (vLLM's, and through Dynamo's worker), and the environment that
does the same."""

from __future__ import annotations

from tests.deploy.corpus_base import DYN, VLLM, Case, H

KV_ON = '"enable_kv_cache_events": true'

CASES: dict[str, Case] = {
    'k-zero': Case(
        H + 'specdec_num_speculative_tokens=0: must be auto or an integer in 1..16',
        {'specdec_num_speculative_tokens': 0}),
    'k-17': Case(
        H + 'specdec_num_speculative_tokens=17: must be auto or an integer in 1..16',
        {'specdec_num_speculative_tokens': 17}),
    'k-str': Case(
        H + "specdec_num_speculative_tokens='3': must be auto or an integer in "
        '1..16',
        {'specdec_num_speculative_tokens': '3'}),
    'k-bool': Case(
        H + 'specdec_num_speculative_tokens=True: must be auto or an integer in '
        '1..16',
        {'specdec_num_speculative_tokens': True}),
    'k-float': Case(
        H + 'specdec_num_speculative_tokens=2.5: must be auto or an integer in '
        '1..16',
        {'specdec_num_speculative_tokens': 2.5}),
    'k-auto-case': Case(
        H + "specdec_num_speculative_tokens='AUTO': must be auto or an integer in "
        '1..16',
        {'specdec_num_speculative_tokens': 'AUTO'}),
    'seqs-zero': Case(
        H + 'specdec_max_num_seqs=0: must be an integer in 1..1024',
        {'specdec_max_num_seqs': 0}),
    'seqs-huge': Case(
        H + 'specdec_max_num_seqs=1025: must be an integer in 1..1024',
        {'specdec_max_num_seqs': 1025}),
    'seqs-str': Case(
        H + "specdec_max_num_seqs='16': must be an integer in 1..1024",
        {'specdec_max_num_seqs': '16'}),
    'health-low': Case(
        H + 'specdec_health_timeout=29: must be an integer in 30..86400',
        {'specdec_health_timeout': 29}),
    'health-high': Case(
        H + 'specdec_health_timeout=86401: must be an integer in 30..86400',
        {'specdec_health_timeout': 86401}),
    'health-str': Case(
        H + "specdec_health_timeout='60': must be an integer in 30..86400",
        {'specdec_health_timeout': '60'}),
    'ver-float': Case(
        H + 'specdec_engine_version=0.9: must be a quoted version string (e.g. '
        "'0.9.2')",
        {'specdec_engine_version': 0.9}),
    'ver-latest': Case(
        H + "specdec_engine_version='latest': is not a version (e.g. 0.9.2 or "
        '1.2.0rc6)',
        {'specdec_engine_version': 'latest'}),
    'ver-inject': Case(
        H + "specdec_engine_version='0.9.2; id': is not a version (e.g. 0.9.2 or "
        '1.2.0rc6)',
        {'specdec_engine_version': '0.9.2; id'}),
    'ver-newline': Case(
        H + "specdec_engine_version='0.9.2\\n': contains a line break or control "
        'character (U+000A)',
        {'specdec_engine_version': '0.9.2\n'}),
    'jt-str': Case(
        H + "specdec_jetson_tuning='yes': must be true or false",
        {'specdec_jetson_tuning': 'yes'}),
    'reverify-str': Case(
        H + "specdec_reverify='true': must be true or false",
        {'specdec_reverify': 'true'}),
    'verify-int': Case(
        H + 'specdec_verify=1: must be true or false',
        {'specdec_verify': 1}),
    'watch-action': Case(
        H + "specdec_watch.action='rm -rf /': must be one of report, reverify",
        {'specdec_watch': {'action': 'rm -rf /'}}),
    'watch-str': Case(
        H + "specdec_watch='report': must be a mapping like {action: report}",
        {'specdec_watch': 'report'}),
    'watch-field': Case(
        H + "specdec_watch.act='report': unknown field; did you mean action?",
        {'specdec_watch': {'act': 'report'}}),
    'watch-list': Case(
        H + "specdec_watch=['report']: must be a mapping like {action: report}",
        {'specdec_watch': ['report']}),
    'vllm-toolplugin': Case(
        H + "specdec_extra_args[0]='--tool-parser-plugin': --tool-parser-plugin "
        'imports a Python file into the API server; not from host data',
        {'specdec_extra_args': ['--tool-parser-plugin', '/tmp/p.py']}),
    'vllm-toolplugin-us': Case(
        H + "specdec_extra_args[0]='--tool_parser_plugin=/tmp/p.py': "
        '--tool-parser-plugin imports a Python file into the API server; not '
        'from host data',
        {'specdec_extra_args': ['--tool_parser_plugin=/tmp/p.py']}),
    'vllm-toolplugin-abbrev': Case(
        H + "specdec_extra_args[0]='--tool-parser-pl=/tmp/p.py': "
        '--tool-parser-plugin imports a Python file into the API server; not '
        'from host data',
        {'specdec_extra_args': ['--tool-parser-pl=/tmp/p.py']}),
    'vllm-reasoningplugin': Case(
        H + "specdec_extra_args[0]='--reasoning-parser-plugin=/x.py': "
        '--reasoning-parser-plugin imports a Python file into the engine; not '
        'from host data',
        {'specdec_extra_args': ['--reasoning-parser-plugin=/x.py']}),
    'vllm-middleware': Case(
        H + "specdec_extra_args[0]='--middleware': --middleware imports a Python "
        'class into the API server; not from host data',
        {'specdec_extra_args': ['--middleware', 'evil.Mw']}),
    'vllm-workercls': Case(
        H + "specdec_extra_args[0]='--worker-cls=evil.Worker': --worker-cls imports "
        "the engine's worker from a Python path; not from host data",
        {'specdec_extra_args': ['--worker-cls=evil.Worker']}),
    'vllm-workerext': Case(
        H + "specdec_extra_args[0]='--worker-extension-cls': --worker-extension-cls "
        "imports a Python class into the engine's worker; not from host data",
        {'specdec_extra_args': ['--worker-extension-cls', 'evil.X']}),
    'vllm-logitsprocs': Case(
        H + "specdec_extra_args[0]='--logits-processors': --logits-processors "
        'imports Python classes into the sampler; not from host data',
        {'specdec_extra_args': ['--logits-processors', 'evil.L']}),
    'vllm-media-root': Case(
        H + "specdec_extra_args[0]='--allowed-local-media-path': "
        "--allowed-local-media-path lets any API caller read the host's files "
        'under that path; not from host data',
        {'specdec_extra_args': ['--allowed-local-media-path', '/']}),
    'vllm-media-etc': Case(
        H + "specdec_extra_args[0]='--allowed-local-media-path=/etc': "
        "--allowed-local-media-path lets any API caller read the host's files "
        'under that path; not from host data',
        {'specdec_extra_args': ['--allowed-local-media-path=/etc']}),
    'vllm-dpaddr': Case(
        H + "specdec_extra_args[0]='--data-parallel-address': "
        '--data-parallel-address opens the data-parallel coordinator on that '
        'address; not from host data',
        {'specdec_extra_args': ['--data-parallel-address', '0.0.0.0']}),
    'vllm-dprpc': Case(
        H + "specdec_extra_args[0]='--data-parallel-rpc-port=29550': "
        "--data-parallel-rpc-port opens the data-parallel coordinator's port; "
        'not from host data',
        {'specdec_extra_args': ['--data-parallel-rpc-port=29550']}),
    'vllm-kv-default': Case(
        H + "specdec_extra_args[0]='--kv-events-config': --kv-events-config binds "
        "its endpoint tcp://*:5557 on every interface (vLLM's default is "
        "tcp://*:5557); name the member's address, or ipc://",
        {'specdec_extra_args': ['--kv-events-config', '{"enable_kv_cache_events": true}']}),
    'vllm-kv-wild': Case(
        H + 'specdec_extra_args[0]=\'--kv-events-config={"publisher": "zmq", '
        '"endpoint": "tcp://… (67 chars): --kv-events-config binds its endpoint '
        "tcp://*:5557 on every interface (vLLM's default is tcp://*:5557); name "
        "the member's address, or ipc://",
        {'specdec_extra_args': [
            '--kv-events-config={"publisher": "zmq", "endpoint": "tcp://*:5557"}']}),
    'vllm-kv-any4': Case(
        H + 'specdec_extra_args[0]=\'--kv-events-config={"enable_kv_cache_events": '
        'true, "endpoi… (85 chars): --kv-events-config binds its endpoint '
        "tcp://0.0.0.0:5557 on every interface (vLLM's default is "
        "tcp://*:5557); name the member's address, or ipc://",
        {'specdec_extra_args': [
            '--kv-events-config={' + KV_ON + ', "endpoint": "tcp://0.0.0.0:5557"}']}),
    'vllm-kv-any6': Case(
        H + 'specdec_extra_args[0]=\'--kv-events-config={"enable_kv_cache_events": '
        'true, "endpoi… (82 chars): --kv-events-config binds its endpoint '
        "tcp://[::]:5557 on every interface (vLLM's default is tcp://*:5557); "
        "name the member's address, or ipc://",
        {'specdec_extra_args': [
            '--kv-events-config={' + KV_ON + ', "endpoint": "tcp://[::]:5557"}']}),
    'vllm-kv-replay': Case(
        H + 'specdec_extra_args[0]=\'--kv-events-config={"enable_kv_cache_events": '
        'true, "endpoi… (114 chars): --kv-events-config binds its '
        "replay_endpoint tcp://*:5558 on every interface (vLLM's default is "
        "tcp://*:5557); name the member's address, or ipc://",
        {'specdec_extra_args': ['--kv-events-config={' + KV_ON + ', "endpoint": "ipc:///tmp/k", '
                                '"replay_endpoint": "tcp://*:5558"}']}),
    'vllm-kv-dotted': Case(
        H + "specdec_extra_args[0]='--kv-events-config.endpoint=tcp://*:1': "
        '--kv-events-config must be one JSON value (--kv-events-config=JSON), '
        'so its endpoint can be checked',
        {'specdec_extra_args': ['--kv-events-config.endpoint=tcp://*:1']}),
    'vllm-kv-notjson': Case(
        H + "specdec_extra_args[0]='--kv-events-config': --kv-events-config must be "
        'a JSON object',
        {'specdec_extra_args': ['--kv-events-config', 'zmq']}),
    'vllm-kv-list': Case(
        H + "specdec_extra_args[0]='--kv-events-config=[1]': --kv-events-config "
        'must be a JSON object',
        {'specdec_extra_args': ['--kv-events-config=[1]']}),
    'vllm-kv-last': Case(
        H + "specdec_extra_args[1]='--kv-events-config': --kv-events-config must be "
        'one JSON value (--kv-events-config=JSON), so its endpoint can be '
        'checked',
        {'specdec_extra_args': ['--enforce-eager', '--kv-events-config']}),
    'vllm-kv-us': Case(
        H + "specdec_extra_args[0]='--kv_events_config': --kv-events-config binds "
        "its endpoint tcp://*:5557 on every interface (vLLM's default is "
        "tcp://*:5557); name the member's address, or ipc://",
        {'specdec_extra_args': ['--kv_events_config', '{"enable_kv_cache_events": true}']}),
    'vllm-ray': Case(
        H + "specdec_extra_args[0]='--distributed-executor-backend': "
        '--distributed-executor-backend ray starts Ray, which listens on every '
        'interface (use mp)',
        {'specdec_extra_args': ['--distributed-executor-backend', 'ray']}),
    'vllm-ray-eq': Case(
        H + "specdec_extra_args[0]='--distributed-executor-backend=RAY': "
        '--distributed-executor-backend ray starts Ray, which listens on every '
        'interface (use mp)',
        {'specdec_extra_args': ['--distributed-executor-backend=RAY']}),
    'dyn-fpm': Case(
        H + "specdec_extra_args[0]='--fpm-trace': --fpm-trace publishes "
        'forward-pass metrics (ZMQ, no authentication) on every interface; not '
        'from host data',
        {'specdec_extra_args': ['--fpm-trace']}, base=DYN),
    'dyn-toolplugin': Case(
        H + "specdec_extra_args[0]='--tool-parser-plugin=/x.py': "
        '--tool-parser-plugin imports a Python file into the API server; not '
        'from host data',
        {'specdec_extra_args': ['--tool-parser-plugin=/x.py']}, base=DYN),
    'dyn-kv-default': Case(
        H + "specdec_extra_args[0]='--kv-events-config': --kv-events-config binds "
        "its endpoint tcp://*:5557 on every interface (vLLM's default is "
        "tcp://*:5557); name the member's address, or ipc://",
        {'specdec_extra_args': ['--kv-events-config', '{' + KV_ON + '}']}, base=DYN),
    'dyn-media': Case(
        H + "specdec_extra_args[0]='--allowed-local-media-path': "
        "--allowed-local-media-path lets any API caller read the host's files "
        'under that path; not from host data',
        {'specdec_extra_args': ['--allowed-local-media-path', '/']}, base=DYN),
}

# Environment that loads code, opens a listener or leaks (the engines' reserved_env): name, the
# variable, its value, the host's engine.
RESERVED = ("is reserved (managed by specdec, or it changes where the engine loads code, weights "
            "or the token from)")
_ENV = [
    ('env-insecure-ser', 'VLLM_ALLOW_INSECURE_SERIALIZATION', '1', VLLM),
    ('env-logcfg', 'VLLM_LOGGING_CONFIG_PATH', '/tmp/log.json', VLLM),
    ('env-lora', 'VLLM_ALLOW_RUNTIME_LORA_UPDATING', 'True', VLLM),
    ('env-debuglog', 'VLLM_DEBUG_LOG_API_SERVER_RESPONSE', 'true', VLLM),
    ('env-hostip', 'VLLM_HOST_IP', '0.0.0.0', VLLM),
    ('env-vllmport', 'VLLM_PORT', '5000', VLLM),
    ('env-rpcpath', 'VLLM_RPC_BASE_PATH', '/tmp', VLLM),
    ('env-modelscope', 'VLLM_USE_MODELSCOPE', '1', VLLM),
    ('env-plugins', 'VLLM_PLUGINS', 'evil', VLLM),
    ('env-fpm-port', 'DYN_FORWARDPASS_METRIC_PORT', '20380', DYN),
    ('env-fpm-trace', 'DYN_FPM_TRACE', '1', DYN),
    ('env-uid', 'SPECDEC_UID', '0', DYN),
    ('env-lower-port', 'vllm_port', '5000', VLLM),
    ('env-fpm-on-vllm', 'DYN_FORWARDPASS_METRIC_PORT', '1', VLLM),
]
CASES.update({name: Case(H + f"specdec_env.{var}={val!r}: {var} {RESERVED}",
                         {"specdec_env": {var: val}}, base=base)
              for name, var, val, base in _ENV})
