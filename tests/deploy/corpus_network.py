"""The bad-input corpus, part 2 (issue 17): where a host listens and who may reach it, ports,
the API key and TLS files, the group's PKI, remote code, the service user, addresses, the
reserved environment of interpreters, loaders and Dynamo, credentials in URLs."""

from __future__ import annotations

from tests.deploy.corpus_base import DYN, KEY, NO_KEY, TRT, Case, H

CASES: dict[str, Case] = {
    # 8. Where the host listens and who may reach it; ports; the API key and TLS files (read on
    # the control node before any host is touched); the service user; addresses (ssh_hostname
    # and a group member's address: no comma, port, brackets or scheme; an IP for a group);
    # interpreter, loader and TLS-store variables; credentials in URLs.
    'listen-port': Case(
        H +
        "specdec_listen='0.0.0.0:8000': must be an IP address (IPv4 or "
        'IPv6, no port)',
        {'specdec_listen': '0.0.0.0:8000'}),
    'listen-brackets': Case(
        H +
        "specdec_listen='[::]': must be an IP address (IPv4 or IPv6, no port)",
        {'specdec_listen': '[::]'}),
    'listen-name': Case(
        H +
        "specdec_listen='localhost': must be an IP address (IPv4 or "
        'IPv6, no port)',
        {'specdec_listen': 'localhost'}),
    'listen-two': Case(
        H +
        "specdec_listen='10.0.0.1,10.0.0.2': must be an IP address "
        '(IPv4 or IPv6, no port)',
        {'specdec_listen': '10.0.0.1,10.0.0.2'}),
    'listen-zone': Case(
        H +
        "specdec_listen='fe80::1%eth0': must be an IP address (IPv4 or "
        'IPv6, no port)',
        {'specdec_listen': 'fe80::1%eth0'}),
    'listen-empty': Case(
        H +
        "specdec_listen='': must be a non-empty string",
        {'specdec_listen': ''}),
    'listen-int': Case(
        H +
        'specdec_listen=5: must be a string',
        {'specdec_listen': 5}),
    'listen-newline': Case(
        H +
        "specdec_listen='10.0.0.1\\nExecStartPre=+/bin/sh': contains a "
        'line break or control character (U+000A)',
        {'specdec_listen': '10.0.0.1\nExecStartPre=+/bin/sh'}),
    'listen-cidr': Case(
        H +
        "specdec_listen='10.0.0.0/8': must be an IP address (IPv4 or "
        'IPv6, no port)',
        {'specdec_listen': '10.0.0.0/8'}),
    'listen-token': Case(
        H +
        "specdec_listen='<redacted>': looks like a Hugging Face token; "
        'secrets do not belong in host data (the token goes to '
        'specdec_hf_token_file or $HF_TOKEN)',
        {'specdec_listen': 'hf_Abc123Abc123Abc123Abc123Abc123'}),
    'listen-space': Case(
        H +
        "specdec_listen=' 10.0.0.1': must not have surrounding whitespace",
        {'specdec_listen': ' 10.0.0.1'}),
    'listen-octal': Case(
        H +
        "specdec_listen='010.0.0.1': must be an IP address (IPv4 or "
        'IPv6, no port)',
        {'specdec_listen': '010.0.0.1'}),
    'listen-list': Case(
        H +
        "specdec_listen=['10.0.0.1']: must be a string",
        {'specdec_listen': ['10.0.0.1']}),
    'allow-str': Case(
        H +
        "specdec_allow_from='10.0.0.0/8': must be a non-empty list of "
        "networks (CIDR, e.g. ['10.0.0.0/8', '192.168.1.0/24'])",
        {'specdec_allow_from': '10.0.0.0/8'}),
    'allow-empty': Case(
        H +
        'specdec_allow_from=[]: must be a non-empty list of networks '
        "(CIDR, e.g. ['10.0.0.0/8', '192.168.1.0/24'])",
        {'specdec_allow_from': []}),
    'allow-hostbits': Case(
        H +
        "specdec_allow_from[0]='10.0.0.1/8': has host bits set",
        {'specdec_allow_from': ['10.0.0.1/8']}),
    'allow-bad': Case(
        H +
        "specdec_allow_from[0]='10.0.0.0/33': is not a network in CIDR "
        'notation (e.g. 10.0.0.0/8)',
        {'specdec_allow_from': ['10.0.0.0/33']}),
    'allow-name': Case(
        H +
        "specdec_allow_from[0]='lan.example': is not a network in CIDR "
        'notation (e.g. 10.0.0.0/8)',
        {'specdec_allow_from': ['lan.example']}),
    'allow-int': Case(
        H +
        'specdec_allow_from[0]=10: must be a string',
        {'specdec_allow_from': [10]}),
    'allow-newline': Case(
        H +
        "specdec_allow_from[0]='10.0.0.0/8\\n': contains a line break "
        'or control character (U+000A)',
        {'specdec_allow_from': ['10.0.0.0/8\n']}),
    'allow-many': Case(
        H +
        "specdec_allow_from=['10.0.0.0/16', '10.1.0.0/16', "
        "'10.2.0.0/16', '10.3.0.0/16',…: has 65 items (at most 64)",
        {"specdec_allow_from": [f"10.{i}.0.0/16" for i in range(65)]}),
    'allow-mapping': Case(
        H +
        "specdec_allow_from={'net': '10.0.0.0/8'}: must be a non-empty "
        "list of networks (CIDR, e.g. ['10.0.0.0/8', '192.168.1.0/24'])",
        {'specdec_allow_from': {'net': '10.0.0.0/8'}}),
    'allow-range': Case(
        H +
        "specdec_allow_from[0]='10.0.0.1-10.0.0.9': is not a network "
        'in CIDR notation (e.g. 10.0.0.0/8)',
        {'specdec_allow_from': ['10.0.0.1-10.0.0.9']}),
    'allow-v6-hostbits': Case(
        H +
        "specdec_allow_from[0]='fd00::1/8': has host bits set",
        {'specdec_allow_from': ['fd00::1/8']}),
    'allow-token': Case(
        H +
        "specdec_allow_from[0]='<redacted>': looks like a Hugging Face "
        'token; secrets do not belong in host data (the token goes to '
        'specdec_hf_token_file or $HF_TOKEN)',
        {'specdec_allow_from': ['hf_Abc123Abc123Abc123Abc123Abc123']}),
    'allow-wild': Case(
        H +
        "specdec_allow_from[0]='*': is not a network in CIDR notation "
        '(e.g. 10.0.0.0/8)',
        {'specdec_allow_from': ['*']}),
    'engine-port-zero': Case(
        H +
        'specdec_engine_port=0: must be an integer in 1024..65535',
        {'specdec_engine_port': 0}),
    'engine-port-huge': Case(
        H +
        'specdec_engine_port=65536: must be an integer in 1024..65535',
        {'specdec_engine_port': 65536}),
    'engine-port-str': Case(
        H +
        "specdec_engine_port='8001': must be an integer in 1024..65535",
        {'specdec_engine_port': '8001'}),
    'engine-port-bool': Case(
        H +
        'specdec_engine_port=True: must be an integer in 1024..65535',
        {'specdec_engine_port': True}),
    'engine-port-low': Case(
        H +
        'specdec_engine_port=80: must be an integer in 1024..65535',
        {'specdec_engine_port': 80}),
    'engine-port-same': Case(
        H +
        'specdec_engine_port=8000: is specdec_port too: the API proxy '
        'listens there, the engine behind it on another port',
        {'specdec_engine_port': 8000}),
    'engine-port-float': Case(
        H +
        'specdec_engine_port=8001.0: must be an integer in 1024..65535',
        {'specdec_engine_port': 8001.0}),
    'port-engine-collide': Case(
        H +
        'specdec_engine_port=9000: is specdec_port too: the API proxy '
        'listens there, the engine behind it on another port',
        {'specdec_port': 9000, 'specdec_engine_port': 9000}),
    'keyfile-token': Case(
        H +
        'specdec_api_key_file=<redacted>: must be a path to a file on '
        'the control node, not the secret itself',
        {'specdec_api_key_file': 'sdk_Abc123Abc123Abc123Abc123Abc123'}),
    'keyfile-hf-token': Case(
        H +
        'specdec_api_key_file=<redacted>: must be a path to a file on '
        'the control node, not the secret itself',
        {'specdec_api_key_file': 'hf_Abc123Abc123Abc123Abc123Abc123'}),
    'keyfile-newline': Case(
        H +
        "specdec_api_key_file='/tmp/k\\n': contains a line break or "
        'control character (U+000A)',
        {'specdec_api_key_file': '/tmp/k\n'}),
    'keyfile-long': Case(
        H +
        "specdec_api_key_file='/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        'aaaaaaaaaaaaaaaaaaa… (4097 chars): is 4097 characters long '
        '(at most 4096)',
        {"specdec_api_key_file": "/" + "a" * 4096}),
    'keyfile-int': Case(
        H +
        'specdec_api_key_file=3: must be a string',
        {'specdec_api_key_file': 3}),
    'keyfile-empty': Case(
        H +
        "specdec_api_key_file='': must be a non-empty string",
        {'specdec_api_key_file': ''}),
    'tls-str': Case(
        H +
        "specdec_tls='/etc/cert.pem': must be false or a mapping {cert: PATH, "
        'key: PATH} (PEM files on the control node)',
        {'specdec_tls': '/etc/cert.pem'}),
    'tls-no-key': Case(
        H +
        "specdec_tls={'cert': '/c'}: must be false or a mapping {cert: PATH, "
        'key: PATH} (PEM files on the control node)',
        {'specdec_tls': {'cert': '/c'}}),
    'tls-extra': Case(
        H +
        "specdec_tls={'cert': '/c', 'key': '/k', 'ca': '/a'}: must be "
        'false or a mapping {cert: PATH, key: PATH} (PEM files on the control node)',
        {'specdec_tls': {'cert': '/c', 'key': '/k', 'ca': '/a'}}),
    'tls-newline': Case(
        H +
        "specdec_tls.cert='/c\\n': contains a line break or control "
        'character (U+000A)',
        {'specdec_tls': {'cert': '/c\n', 'key': '/k'}}),
    'tls-token': Case(
        H +
        'specdec_tls.cert=<redacted>: must be a path to a file on the '
        'control node, not the secret itself',
        {'specdec_tls': {'cert': 'hf_Abc123Abc123Abc123Abc123Abc123', 'key': '/k'}}),
    'tls-list': Case(
        H +
        "specdec_tls=['/c', '/k']: must be false or a mapping {cert: PATH, key: "
        'PATH} (PEM files on the control node)',
        {'specdec_tls': ['/c', '/k']}),
    'pki-newline': Case(
        H +
        "specdec_pki_dir='/tmp/p\\n': contains a line break or control "
        'character (U+000A)',
        {'specdec_pki_dir': '/tmp/p\n'}),
    'pki-token': Case(
        H +
        'specdec_pki_dir=<redacted>: must be a path to a file on the '
        'control node, not the secret itself',
        {'specdec_pki_dir': 'sdk_Abc123Abc123Abc123Abc123Abc123'}),
    'pki-int': Case(
        H +
        'specdec_pki_dir=1: must be a string',
        {'specdec_pki_dir': 1}),
    'trust-str': Case(
        H +
        "specdec_trust_remote_code='yes': must be true or false",
        {'specdec_trust_remote_code': 'yes'}),
    'trust-int': Case(
        H +
        'specdec_trust_remote_code=1: must be true or false',
        {'specdec_trust_remote_code': 1}),
    'trust-flag-vllm': Case(
        H +
        "specdec_extra_args[0]='--trust-remote-code': "
        '--trust-remote-code is managed by specdec (use '
        'specdec_trust_remote_code)',
        {'specdec_extra_args': ['--trust-remote-code']}),
    'trust-flag-vllm-us': Case(
        H +
        "specdec_extra_args[0]='--trust_remote_code': "
        '--trust-remote-code is managed by specdec (use '
        'specdec_trust_remote_code)',
        {'specdec_extra_args': ['--trust_remote_code']}),
    'trust-flag-vllm-abbrev': Case(
        H +
        "specdec_extra_args[0]='--trust-remote': --trust-remote-code "
        'is managed by specdec (use specdec_trust_remote_code)',
        {'specdec_extra_args': ['--trust-remote']}),
    'trust-flag-trt': Case(
        H +
        "specdec_extra_args[0]='--trust_remote_code': "
        '--trust_remote_code is managed by specdec (use '
        'specdec_trust_remote_code)',
        {'specdec_extra_args': ['--trust_remote_code']}, base=TRT),
    'trust-flag-dynamo': Case(
        H +
        "specdec_extra_args[0]='--trust-remote-code': "
        '--trust-remote-code is managed by specdec (use '
        'specdec_trust_remote_code)',
        {'specdec_extra_args': ['--trust-remote-code']}, base=DYN),
    'vllm-uds': Case(
        H +
        "specdec_extra_args[0]='--uds': --uds is managed by specdec "
        "(the engine listens on 127.0.0.1, behind specdec's API proxy)",
        {'specdec_extra_args': ['--uds', '/tmp/s']}),
    'vllm-ssl-key': Case(
        H +
        "specdec_extra_args[0]='--ssl-keyfile=/k': --ssl-keyfile is "
        'managed by specdec (use specdec_tls (the API proxy serves HTTPS))',
        {'specdec_extra_args': ['--ssl-keyfile=/k']}),
    'user-root': Case(
        H +
        "specdec_service_user='root': is root; the service user must "
        'be a dedicated system account',
        {'specdec_service_user': 'root'}),
    'user-login': Case(
        H +
        "specdec_service_user='nvidia': is the SSH login user "
        '(ssh_user); the service user must be a dedicated system account',
        {'specdec_service_user': 'nvidia', 'ssh_user': 'nvidia'}),
    'ssh-comma': Case(
        H +
        "ssh_hostname='10.0.0.1,10.0.0.2': must be an IP address or a "
        "host name (letters, digits, '-' and '.'; no port, no comma, "
        'no brackets)',
        {'ssh_hostname': '10.0.0.1,10.0.0.2'}),
    'ssh-port': Case(
        H +
        "ssh_hostname='10.0.0.1:22': must be an IP address or a host "
        "name (letters, digits, '-' and '.'; no port, no comma, no brackets)",
        {'ssh_hostname': '10.0.0.1:22'}),
    'ssh-brackets': Case(
        H +
        "ssh_hostname='[fd00::1]': must be an IP address or a host "
        "name (letters, digits, '-' and '.'; no port, no comma, no brackets)",
        {'ssh_hostname': '[fd00::1]'}),
    'ssh-scheme': Case(
        H +
        "ssh_hostname='ssh://10.0.0.1': must be an IP address or a "
        "host name (letters, digits, '-' and '.'; no port, no comma, "
        'no brackets)',
        {'ssh_hostname': 'ssh://10.0.0.1'}),
    'ssh-space': Case(
        H +
        "ssh_hostname='10.0.0.1 x': must be an IP address or a host "
        "name (letters, digits, '-' and '.'; no port, no comma, no brackets)",
        {'ssh_hostname': '10.0.0.1 x'}),
    'ssh-newline': Case(
        H +
        "ssh_hostname='10.0.0.1\\nx': contains a line break or control "
        'character (U+000A)',
        {'ssh_hostname': '10.0.0.1\nx'}),
    'ssh-zone': Case(
        H +
        "ssh_hostname='fe80::1%eth0': must be an IP address or a host "
        "name (letters, digits, '-' and '.'; no port, no comma, no brackets)",
        {'ssh_hostname': 'fe80::1%eth0'}),
    'ssh-partial-ip': Case(
        H +
        "ssh_hostname='10.0.0': must be an IP address or a host name "
        "(letters, digits, '-' and '.'; no port, no comma, no brackets)",
        {'ssh_hostname': '10.0.0'}),
    'ssh-dash': Case(
        H +
        "ssh_hostname='-oProxyCommand=x': must be an IP address or a "
        "host name (letters, digits, '-' and '.'; no port, no comma, "
        'no brackets)',
        {'ssh_hostname': '-oProxyCommand=x'}),
    'ssh-user': Case(
        H +
        "ssh_hostname='root@10.0.0.1': must be an IP address or a host "
        "name (letters, digits, '-' and '.'; no port, no comma, no brackets)",
        {'ssh_hostname': 'root@10.0.0.1'}),
    'ssh-slash': Case(
        H +
        "ssh_hostname='10.0.0.1/24': must be an IP address or a host "
        "name (letters, digits, '-' and '.'; no port, no comma, no brackets)",
        {'ssh_hostname': '10.0.0.1/24'}),
    'ssh-long': Case(
        H +
        "ssh_hostname='aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        'aaaaaaaaaaa… (254 chars): is 254 characters long (at most 253)',
        {"ssh_hostname": "a" * 254}),
    'ssh-token': Case(
        H +
        "ssh_hostname='<redacted>': looks like a Hugging Face token; "
        'secrets do not belong in host data (the token goes to '
        'specdec_hf_token_file or $HF_TOKEN)',
        {'ssh_hostname': 'hf_Abc123Abc123Abc123Abc123Abc123'}),
    'ssh-underscore': Case(
        H +
        "ssh_hostname='spark_a.lan': must be an IP address or a host "
        "name (letters, digits, '-' and '.'; no port, no comma, no brackets)",
        {'ssh_hostname': 'spark_a.lan'}),
    'dynaddr-comma': Case(
        H +
        "specdec_dynamo_address='10.0.0.1,10.0.0.2': must be an IP "
        "address or a host name (letters, digits, '-' and '.'; no "
        'port, no comma, no brackets)',
        {'specdec_dynamo_address': '10.0.0.1,10.0.0.2'}, base=DYN),
    'dynaddr-port': Case(
        H +
        "specdec_dynamo_address='10.0.0.1:2379': must be an IP address "
        "or a host name (letters, digits, '-' and '.'; no port, no "
        'comma, no brackets)',
        {'specdec_dynamo_address': '10.0.0.1:2379'}, base=DYN),
    'dynaddr-brackets': Case(
        H +
        "specdec_dynamo_address='[fd00::1]': must be an IP address or "
        "a host name (letters, digits, '-' and '.'; no port, no comma, "
        'no brackets)',
        {'specdec_dynamo_address': '[fd00::1]'}, base=DYN),
    'dynaddr-scheme': Case(
        H +
        "specdec_dynamo_address='http://10.0.0.1': must be an IP "
        "address or a host name (letters, digits, '-' and '.'; no "
        'port, no comma, no brackets)',
        {'specdec_dynamo_address': 'http://10.0.0.1'}, base=DYN),
    'dynaddr-name': Case(
        H +
        "specdec_dynamo_address='spark-a.lan': must be an IP address "
        "(the group's firewall lets its members in by address; set it, "
        "or ssh_hostname, to the member's IP)",
        {'specdec_dynamo_address': 'spark-a.lan'}, base=DYN),
    'dynaddr-newline': Case(
        H +
        "specdec_dynamo_address='10.0.0.1\\n': contains a line break or "
        'control character (U+000A)',
        {'specdec_dynamo_address': '10.0.0.1\n'}, base=DYN),
    'dynaddr-zone': Case(
        H +
        "specdec_dynamo_address='fe80::1%eth0': must be an IP address "
        "or a host name (letters, digits, '-' and '.'; no port, no "
        'comma, no brackets)',
        {'specdec_dynamo_address': 'fe80::1%eth0'}, base=DYN),
    'dynaddr-int': Case(
        H +
        'specdec_dynamo_address=10: must be a string',
        {'specdec_dynamo_address': 10}, base=DYN),
    'dynaddr-space': Case(
        H +
        "specdec_dynamo_address='10.0.0.1 ': must not have surrounding "
        'whitespace',
        {'specdec_dynamo_address': '10.0.0.1 '}, base=DYN),
    'dynaddr-percent': Case(
        H +
        "specdec_dynamo_address='10.0.0.1%25': must be an IP address "
        "or a host name (letters, digits, '-' and '.'; no port, no "
        'comma, no brackets)',
        {'specdec_dynamo_address': '10.0.0.1%25'}, base=DYN),
    'dyn-no-ip': Case(
        H +
        "specdec_dynamo_address='bad-1': must be an IP address (the "
        "group's firewall lets its members in by address; set it, or "
        "ssh_hostname, to the member's IP)",
        {'ssh_hostname': None}, base=DYN),
    'dyn-hostname': Case(
        H +
        "specdec_dynamo_address='spark-a.lan': must be an IP address "
        "(the group's firewall lets its members in by address; set it, "
        "or ssh_hostname, to the member's IP)",
        {'ssh_hostname': 'spark-a.lan'}, base=DYN),
    "keyfile-missing": Case(f"{H}specdec_api_key_file='{NO_KEY}': cannot read (No such file or "
                            "directory)", {"specdec_api_key_file": NO_KEY}, reads_token=True),
    "keyfile-not-a-key": Case(f"{H}specdec_api_key_file='{{path}}': does not hold a specdec API "
                              "key (sdk_ followed by 20-200 letters and digits)",
                              key_file=b"my-password\n"),
    "keyfile-world-readable": Case(f"{H}specdec_api_key_file='{{path}}': is readable by others "
                                   "(chmod 600)", key_file=KEY.encode() + b"\n", key_mode=0o644),
    "tls-missing": Case(f"{H}specdec_tls.cert='{NO_KEY}': cannot read (No such file or directory)",
                        {"specdec_tls": {"cert": NO_KEY, "key": NO_KEY}}, reads_token=True),
    "tls-not-pem": Case(f"{H}specdec_tls.cert='/etc/hostname': is not a PEM file",
                        {"specdec_tls": {"cert": "/etc/hostname", "key": "/etc/hostname"}},
                        reads_token=True),
}
