"""The bad-input corpus, part 4 (issue 29): addresses a socket, a firewall rule or a peer cannot
use (multicast, broadcast, IPv4-mapped, link-local, zone ids, `[:::::]`, `999.999.999.999`), the
site mirror's hosts and registries (its URLs belong to high 1 and 3), sites, serving groups and
Dynamo's ports and router, the tune cache's location, accounts of the distribution as the service
user (engine flags and environment: corpus_flags)."""

from __future__ import annotations

from tests.deploy.corpus_base import DYN, VLLM, Case, H

SITE = {**VLLM, "specdec_site": "s1", "specdec_site_mirror": True}
# specdec.config.endpoints' reasons
LOCAL = ("is this host or its link (loopback, unspecified or link-local: 169.254.169.254 is a "
         "cloud's metadata service), not a server")
MULTICAST = "is multicast (no TCP connection comes from or goes to it)"
BROADCAST = "is the broadcast address (no TCP connection comes from or goes to it)"
MAPPED = "is IPv4-mapped (::ffff:a.b.c.d never appears on the wire; write the IPv4 address)"

CASES: dict[str, Case] = {
    'listen-multicast': Case(
        H + "specdec_listen='224.0.0.1': " + MULTICAST,
        {'specdec_listen': '224.0.0.1'}),
    'listen-mc6': Case(
        H + "specdec_listen='ff02::1': " + MULTICAST,
        {'specdec_listen': 'ff02::1'}),
    'listen-bcast': Case(
        H + "specdec_listen='255.255.255.255': " + BROADCAST,
        {'specdec_listen': '255.255.255.255'}),
    'listen-mapped': Case(
        H + "specdec_listen='::ffff:10.0.0.1': " + MAPPED,
        {'specdec_listen': '::ffff:10.0.0.1'}),
    'listen-ll': Case(
        H + "specdec_listen='fe80::1': is IPv6 link-local (it needs a zone id, "
        'which a unit or a firewall rule cannot take)',
        {'specdec_listen': 'fe80::1'}),
    'allow-zone': Case(
        H + "specdec_allow_from[0]='fe80::%eth0/64': has an IPv6 zone id (nft takes "
        'none)',
        {'specdec_allow_from': ['fe80::%eth0/64']}),
    'allow-mapped': Case(
        H + "specdec_allow_from[0]='::ffff:10.0.0.0/104': " + MAPPED,
        {'specdec_allow_from': ['::ffff:10.0.0.0/104']}),
    'allow-mc': Case(
        H + "specdec_allow_from[0]='224.0.0.0/4': " + MULTICAST,
        {'specdec_allow_from': ['224.0.0.0/4']}),
    'allow-mc6': Case(
        H + "specdec_allow_from[0]='ff00::/8': " + MULTICAST,
        {'specdec_allow_from': ['ff00::/8']}),
    'allow-bcast': Case(
        H + "specdec_allow_from[0]='255.255.255.255/32': " + BROADCAST,
        {'specdec_allow_from': ['255.255.255.255/32']}),
    'dynaddr-mc': Case(
        H + "specdec_dynamo_address='224.0.0.1': " + MULTICAST,
        {'specdec_dynamo_address': '224.0.0.1'}, base=DYN),
    'dynaddr-bcast': Case(
        H + "specdec_dynamo_address='255.255.255.255': " + BROADCAST,
        {'specdec_dynamo_address': '255.255.255.255'}, base=DYN),
    'dynaddr-mapped': Case(
        H + "specdec_dynamo_address='::ffff:10.0.0.1': " + MAPPED,
        {'specdec_dynamo_address': '::ffff:10.0.0.1'}, base=DYN),
    'dynaddr-any': Case(
        H + "specdec_dynamo_address='0.0.0.0': is the unspecified address (no peer "
        'has it)',
        {'specdec_dynamo_address': '0.0.0.0'}, base=DYN),
    'dynaddr-any6': Case(
        H + "specdec_dynamo_address='::': is the unspecified address (no peer has "
        'it)',
        {'specdec_dynamo_address': '::'}, base=DYN),
    'dynaddr-ll': Case(
        H + "specdec_dynamo_address='fe80::1': is IPv6 link-local (it needs a zone "
        'id, which a unit or a firewall rule cannot take)',
        {'specdec_dynamo_address': 'fe80::1'}, base=DYN),
    'dynssh-mc': Case(
        H + "specdec_dynamo_address='239.1.1.1': " + MULTICAST,
        {'ssh_hostname': '239.1.1.1'}, base=DYN),
    'cdn-localhost': Case(
        H + "specdec_hub_cdn_hosts='localhost:2379': names this host (localhost); a "
        'remote server is needed',
        {'specdec_hub_cdn_hosts': ['localhost:2379']}, base=SITE),
    'cdn-metadata': Case(
        H + "specdec_hub_cdn_hosts='169.254.169.254': " + LOCAL,
        {'specdec_hub_cdn_hosts': ['169.254.169.254']}, base=SITE),
    'cdn-loop': Case(
        H + "specdec_hub_cdn_hosts='127.0.0.1:8080': " + LOCAL,
        {'specdec_hub_cdn_hosts': ['127.0.0.1:8080']}, base=SITE),
    'cdn-loop6': Case(
        H + "specdec_hub_cdn_hosts='[::1]': " + LOCAL,
        {'specdec_hub_cdn_hosts': ['[::1]']}, base=SITE),
    'cdn-any': Case(
        H + "specdec_hub_cdn_hosts='0.0.0.0': " + LOCAL,
        {'specdec_hub_cdn_hosts': ['0.0.0.0']}, base=SITE),
    'cdn-ll6': Case(
        H + "specdec_hub_cdn_hosts='[fe80::1]:443': " + LOCAL,
        {'specdec_hub_cdn_hosts': ['[fe80::1]:443']}, base=SITE),
    'cdn-mc': Case(
        H + "specdec_hub_cdn_hosts='224.0.0.1': " + MULTICAST,
        {'specdec_hub_cdn_hosts': ['224.0.0.1']}, base=SITE),
    'cdn-sub-localhost': Case(
        H + "specdec_hub_cdn_hosts='cdn.localhost': names this host (localhost); a "
        'remote server is needed',
        {'specdec_hub_cdn_hosts': ['cdn.localhost']}, base=SITE),
    'cdn-colons': Case(
        H + "specdec_hub_cdn_hosts='[:::::]': not a host name or address[:port]",
        {'specdec_hub_cdn_hosts': ['[:::::]']}, base=SITE),
    'cdn-999': Case(
        H + "specdec_hub_cdn_hosts='999.999.999.999': not a host name or "
        'address[:port]',
        {'specdec_hub_cdn_hosts': ['999.999.999.999']}, base=SITE),
    'cdn-str': Case(
        H + "specdec_hub_cdn_hosts='cdn-lfs.hf.co': must be a list of host[:port] "
        'names',
        {'specdec_hub_cdn_hosts': 'cdn-lfs.hf.co'}, base=SITE),
    'cdn-empty': Case(
        H + 'specdec_hub_cdn_hosts=[]: must be a list of host[:port] names',
        {'specdec_hub_cdn_hosts': []}, base=SITE),
    'cdn-int': Case(
        H + 'specdec_hub_cdn_hosts=5: must be a string',
        {'specdec_hub_cdn_hosts': [5]}, base=SITE),
    'cdn-many': Case(
        H + "specdec_hub_cdn_hosts=['c0.hf.co', 'c1.hf.co', 'c2.hf.co', 'c3.hf.co', "
        "'c4.hf.co',…: has 33 items (at most 32)",
        {"specdec_hub_cdn_hosts": [f"c{i}.hf.co" for i in range(33)]}, base=SITE),
    'cdn-newline': Case(
        H + "specdec_hub_cdn_hosts='cdn.hf.co\\nx': contains a line break or "
        'control character (U+000A)',
        {'specdec_hub_cdn_hosts': ['cdn.hf.co\nx']}, base=SITE),
    'cdn-port0': Case(
        H + "specdec_hub_cdn_hosts='cdn.hf.co:0': not a host name or address[:port]",
        {'specdec_hub_cdn_hosts': ['cdn.hf.co:0']}, base=SITE),
    'cdn-port-big': Case(
        H + "specdec_hub_cdn_hosts='cdn.hf.co:65536': not a host name or "
        'address[:port]',
        {'specdec_hub_cdn_hosts': ['cdn.hf.co:65536']}, base=SITE),
    'cdn-path': Case(
        H + "specdec_hub_cdn_hosts='cdn.hf.co/x': not a host name or address[:port]",
        {'specdec_hub_cdn_hosts': ['cdn.hf.co/x']}, base=SITE),
    'cdn-scheme': Case(
        H + "specdec_hub_cdn_hosts='https://cdn.hf.co': not a host name or "
        'address[:port]',
        {'specdec_hub_cdn_hosts': ['https://cdn.hf.co']}, base=SITE),
    'cdn-not-mirror': Case(
        H + "specdec_hub_cdn_hosts=['cdn.hf.co']: only applies with "
        'specdec_site_mirror: true',
        {'specdec_hub_cdn_hosts': ['cdn.hf.co']}),
    'mirroraddr-colons': Case(
        H + "specdec_site_mirror_address='[:::::]': not a host name or address",
        {'specdec_site_mirror_address': '[:::::]'}, base=SITE),
    'mirroraddr-999': Case(
        H + "specdec_site_mirror_address='999.999.999.999': not a host name or "
        'address',
        {'specdec_site_mirror_address': '999.999.999.999'}, base=SITE),
    'mirroraddr-port': Case(
        H + "specdec_site_mirror_address='10.0.0.1:80': not a host name or address",
        {'specdec_site_mirror_address': '10.0.0.1:80'}, base=SITE),
    'mirroraddr-int': Case(
        H + 'specdec_site_mirror_address=10: must be a string',
        {'specdec_site_mirror_address': 10}, base=SITE),
    'resolver-colons': Case(
        H + "specdec_mirror_resolver='[:::::]': not a host name or address",
        {'specdec_mirror_resolver': '[:::::]'}, base=SITE),
    'resolver-999': Case(
        H + "specdec_mirror_resolver='999.999.999.999': not a host name or address",
        {'specdec_mirror_resolver': '999.999.999.999'}, base=SITE),
    'resolver-port': Case(
        H + "specdec_mirror_resolver='10.0.0.1:53': not a host name or address",
        {'specdec_mirror_resolver': '10.0.0.1:53'}, base=SITE),
    'resolver-list': Case(
        H + "specdec_mirror_resolver=['10.0.0.1']: must be a string",
        {'specdec_mirror_resolver': ['10.0.0.1']}, base=SITE),
    'reg-collide': Case(
        H + "specdec_registry_upstreams: 'nvcr.io' and 'nvcr-io' would share one "
        "cache (both named 'nvcr-io'); keep one",
        {'specdec_registry_upstreams': {'nvcr.io': 'https://nvcr.io',
                                        'nvcr-io': 'https://nvcr.io'}}, base=SITE),
    'reg-collide-case': Case(
        H + "specdec_registry_upstreams: 'a.b' and 'A.B' would share one cache "
        "(both named 'a-b'); keep one",
        {'specdec_registry_upstreams': {'a.b': 'https://a.b', 'A.B': 'https://a.b'}}, base=SITE),
    'reg-key-colons': Case(
        H + "specdec_registry_upstreams='[:::::]': not a host name or "
        'address[:port]',
        {'specdec_registry_upstreams': {'[:::::]': 'https://nvcr.io'}}, base=SITE),
    'reg-key-999': Case(
        H + "specdec_registry_upstreams='999.999.999.999': not a host name or "
        'address[:port]',
        {'specdec_registry_upstreams': {'999.999.999.999': 'https://nvcr.io'}}, base=SITE),
    'reg-list': Case(
        H + "specdec_registry_upstreams=['nvcr.io']: must be a mapping of registry "
        'host[:port] to its upstream URL',
        {'specdec_registry_upstreams': ['nvcr.io']}, base=SITE),
    'reg-many': Case(
        H + "specdec_registry_upstreams={'r0.io': 'https://r.io', 'r1.io': "
        "'https://r.io', 'r2.io': …: has 17 items (at most 16)",
        {"specdec_registry_upstreams": {f"r{i}.io": "https://r.io" for i in range(17)}}, base=SITE),
    'site-upper': Case(
        H + "specdec_site='Shop1': a site name is lowercase letters, digits and - "
        '(at most 31)',
        {'specdec_site': 'Shop1'}),
    'site-long': Case(
        H + "specdec_site='ssssssssssssssssssssssssssssssss': a site name is "
        'lowercase letters, digits and - (at most 31)',
        {"specdec_site": "s" * 32}),
    'site-under': Case(
        H + "specdec_site='shop_1': a site name is lowercase letters, digits and - "
        '(at most 31)',
        {'specdec_site': 'shop_1'}),
    'site-int': Case(
        H + 'specdec_site=1: must be a string',
        {'specdec_site': 1}),
    'site-dash': Case(
        H + "specdec_site='-shop': a site name is lowercase letters, digits and - "
        '(at most 31)',
        {'specdec_site': '-shop'}),
    'mirror-no-site': Case(
        H + 'specdec_site_mirror=True: a site mirror serves a site: set '
        'specdec_site',
        {'specdec_site_mirror': True}),
    'mirror-str': Case(
        H + "specdec_site_mirror='yes': must be true or false",
        {'specdec_site': 's1', 'specdec_site_mirror': 'yes'}),
    'resolver-not-mirror': Case(
        H + "specdec_mirror_resolver='10.0.0.1': only applies with "
        'specdec_site_mirror: true',
        {'specdec_mirror_resolver': '10.0.0.1'}),
    'group-upper': Case(
        H + "specdec_group='Pair': a group name is lowercase letters, digits and - "
        '(at most 31)',
        {'specdec_group': 'Pair'}, base=DYN),
    'group-long': Case(
        H + "specdec_group='gggggggggggggggggggggggggggggggg': a group name is "
        'lowercase letters, digits and - (at most 31)',
        {"specdec_group": "g" * 32}, base=DYN),
    'group-under': Case(
        H + "specdec_group='a_b': a group name is lowercase letters, digits and - "
        '(at most 31)',
        {'specdec_group': 'a_b'}, base=DYN),
    'group-int': Case(
        H + 'specdec_group=3: must be a string',
        {'specdec_group': 3}, base=DYN),
    'group-newline': Case(
        H + "specdec_group='a\\nb': contains a line break or control character "
        '(U+000A)',
        {'specdec_group': 'a\nb'}, base=DYN),
    'group-vllm': Case(
        H + "specdec_group='pair': only applies to specdec_engine='dynamo'",
        {'specdec_group': 'pair'}),
    'group-front-bad': Case(
        H + "specdec_group_frontend='a b': not a valid inventory host name (1-63 "
        "letters, digits, '.', '_' or '-', starting with a letter or digit; "
        'optional @connector/ prefix)',
        {'specdec_group_frontend': 'a b'}, base=DYN),
    'group-front-other': Case(
        H + "specdec_group_frontend='elsewhere': not a member of group 'pair' "
        '(members: @fake/bad-1)',
        {'specdec_group': 'pair', 'specdec_group_frontend': 'elsewhere'}, base=DYN),
    'group-front-vllm': Case(
        H + "specdec_group_frontend='x': only applies to specdec_engine='dynamo'",
        {'specdec_group_frontend': 'x'}),
    'dynport-zero': Case(
        H + 'specdec_dynamo_system_port=0: must be an integer in 1024..32767',
        {'specdec_dynamo_system_port': 0}, base=DYN),
    'dynport-i16': Case(
        H + 'specdec_dynamo_system_port=40000: must be an integer in 1024..32767',
        {'specdec_dynamo_system_port': 40000}, base=DYN),
    'dynport-str': Case(
        H + "specdec_dynamo_system_port='8081': must be an integer in 1024..32767",
        {'specdec_dynamo_system_port': '8081'}, base=DYN),
    'dynport-bool': Case(
        H + 'specdec_dynamo_system_port=True: must be an integer in 1024..32767',
        {'specdec_dynamo_system_port': True}, base=DYN),
    'dynport-low': Case(
        H + 'specdec_dynamo_system_port=1023: must be an integer in 1024..32767',
        {'specdec_dynamo_system_port': 1023}, base=DYN),
    'dynport-vllm': Case(
        H + 'specdec_dynamo_system_port=9000: only applies to '
        "specdec_engine='dynamo'",
        {'specdec_dynamo_system_port': 9000}),
    'router-fast': Case(
        H + "specdec_dynamo_router_mode='fastest': must be one of round-robin, "
        'random, power-of-two, kv, direct, least-loaded, device-aware-weighted',
        {'specdec_dynamo_router_mode': 'fastest'}, base=DYN),
    'router-int': Case(
        H + 'specdec_dynamo_router_mode=1: must be a string',
        {'specdec_dynamo_router_mode': 1}, base=DYN),
    'router-case': Case(
        H + "specdec_dynamo_router_mode='KV': must be one of round-robin, random, "
        'power-of-two, kv, direct, least-loaded, device-aware-weighted; did you mean kv?',
        {'specdec_dynamo_router_mode': 'KV'}, base=DYN),
    'router-space': Case(
        H + "specdec_dynamo_router_mode='kv ': must not have surrounding whitespace",
        {'specdec_dynamo_router_mode': 'kv '}, base=DYN),
    'migr-neg': Case(
        H + 'specdec_dynamo_migration_limit=-1: must be an integer in 0..16',
        {'specdec_dynamo_migration_limit': -1}, base=DYN),
    'migr-str': Case(
        H + "specdec_dynamo_migration_limit='3': must be an integer in 0..16",
        {'specdec_dynamo_migration_limit': '3'}, base=DYN),
    'migr-huge': Case(
        H + 'specdec_dynamo_migration_limit=1000000: must be an integer in 0..16',
        {'specdec_dynamo_migration_limit': 1000000}, base=DYN),
    'migr-float': Case(
        H + 'specdec_dynamo_migration_limit=2.5: must be an integer in 0..16',
        {'specdec_dynamo_migration_limit': 2.5}, base=DYN),
    'tune-newline': Case(
        H + "specdec_tune_cache='/tmp/t\\nx': contains a line break or control "
        'character (U+000A)',
        {'specdec_tune_cache': '/tmp/t\nx'}),
    'tune-long': Case(
        H + "specdec_tune_cache='/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa… "
        '(4097 chars): is 4097 characters long (at most 4096)',
        {"specdec_tune_cache": "/" + "a" * 4096}),
    'tune-int': Case(
        H + 'specdec_tune_cache=7: must be a string',
        {'specdec_tune_cache': 7}),
    'tune-scheme': Case(
        H + "specdec_tune_cache='s3://bucket/tune': no store for s3:// (known: none "
        'registered); use a directory',
        {'specdec_tune_cache': 's3://bucket/tune'}),
    'tune-empty': Case(
        H + "specdec_tune_cache='': must be a non-empty string",
        {'specdec_tune_cache': ''}),
    'tune-token': Case(
        H + "specdec_tune_cache='<redacted>': looks like a Hugging Face token; "
        'secrets do not belong in host data (the token goes to '
        'specdec_hf_token_file or $HF_TOKEN)',
        {'specdec_tune_cache': 'hf_Abc123Abc123Abc123Abc123Abc123'}),
    'tune-etcd': Case(
        H + "specdec_tune_cache='etcd://127.0.0.1:2379': no store for etcd:// "
        '(known: none registered); use a directory',
        {'specdec_tune_cache': 'etcd://127.0.0.1:2379'}),
    'user-www': Case(
        H + "specdec_service_user='www-data': is an account of the distribution or "
        "a package; the service user must be an account of specdec's own",
        {'specdec_service_user': 'www-data'}),
    'user-dbus': Case(
        H + "specdec_service_user='messagebus': is an account of the distribution "
        "or a package; the service user must be an account of specdec's own",
        {'specdec_service_user': 'messagebus'}),
    'user-sshd': Case(
        H + "specdec_service_user='sshd': is an account of the distribution or a "
        "package; the service user must be an account of specdec's own",
        {'specdec_service_user': 'sshd'}),
    'user-apt': Case(
        H + "specdec_service_user='_apt': is an account of the distribution or a "
        "package; the service user must be an account of specdec's own",
        {'specdec_service_user': '_apt'}),
    'user-etcd': Case(
        H + "specdec_service_user='etcd': is an account of the distribution or a "
        "package; the service user must be an account of specdec's own",
        {'specdec_service_user': 'etcd'}),
    'user-daemon': Case(
        H + "specdec_service_user='daemon': is an account of the distribution or a "
        "package; the service user must be an account of specdec's own",
        {'specdec_service_user': 'daemon'}),
    'user-registry': Case(
        H + "specdec_service_user='docker-registry': is an account of the "
        'distribution or a package; the service user must be an account of '
        "specdec's own",
        {'specdec_service_user': 'docker-registry'}),
    'user-sdnet': Case(
        H + "specdec_service_user='systemd-network': is an account of the "
        'distribution or a package; the service user must be an account of '
        "specdec's own",
        {'specdec_service_user': 'systemd-network'}),
    'user-nobody': Case(
        H + "specdec_service_user='nobody': is an account of the distribution or a "
        "package; the service user must be an account of specdec's own",
        {'specdec_service_user': 'nobody'}),
    'user-upper': Case(
        H + "specdec_service_user='Specdec': is not a valid user name",
        {'specdec_service_user': 'Specdec'}),
    'user-long': Case(
        H + "specdec_service_user='sssssssssssssssssssssssssssssssss': is not a "
        'valid user name',
        {"specdec_service_user": "s" * 33}),
    'user-space': Case(
        H + "specdec_service_user='spec dec': is not a valid user name",
        {'specdec_service_user': 'spec dec'}),
    'user-dash': Case(
        H + "specdec_service_user='-specdec': is not a valid user name",
        {'specdec_service_user': '-specdec'}),
    'user-int': Case(
        H + 'specdec_service_user=999: must be a string',
        {'specdec_service_user': 999}),
}
