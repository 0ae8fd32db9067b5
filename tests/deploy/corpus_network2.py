"""The bad-input corpus, network part 2 (issue 29): the Hub endpoint, the site mirror's upstreams
and registries (https only, but to the host's own loopback; URL paths in RFC 3986 without ';',
'$', quotes: nothing that could become nginx directives), the API's TLS and key scope, the
firewall's own openings, the SSH port it keeps, a private Hub's CA file."""

from __future__ import annotations

from tests.deploy.corpus_base import CTRL, SECRET, TOK, VLLM, Case, H

# a site mirror host: the mirror-only keys apply
MIRROR = {**VLLM, "specdec_site": "s1", "specdec_site_mirror": True}
PLAIN = ("plain http:// only to this host's own loopback (127.0.0.1, [::1], localhost): on a "
         "network anyone can read and change what it carries (the token, the files); use "
         "https://")
PATH = ("the URL's path may hold only letters, digits, '/', '-._~!&()*+,=:@' and %XX escapes "
        "(RFC 3986 without ';', '$' or quotes)")
NOT_URL = "not an https:// URL (https://host[:port][/path], no query)"
TLS = "must be false or a mapping {cert: PATH, key: PATH} (PEM files on the control node)"
FW = "must be a mapping of TCP port to a list of networks, e.g. {9100: ['10.0.0.0/8']}"
PORT = "must be an integer in 1..65535"
CIDR = "is not a network in CIDR notation (e.g. 10.0.0.0/8)"

CASES: dict[str, Case] = {
    'hubep-http-lan': Case(
        H + "specdec_hub_endpoint='http://10.0.0.5:8180': " + PLAIN,
        {'specdec_hub_endpoint': 'http://10.0.0.5:8180'}),
    'hubep-http-name': Case(
        H + "specdec_hub_endpoint='http://mirror.lan:8180': " + PLAIN,
        {'specdec_hub_endpoint': 'http://mirror.lan:8180'}),
    'hubep-http-v6': Case(
        H + "specdec_hub_endpoint='http://[fd00::5]:8180': " + PLAIN,
        {'specdec_hub_endpoint': 'http://[fd00::5]:8180'}),
    'hubep-http-mapped': Case(
        H + "specdec_hub_endpoint='http://[::ffff:10.0.0.5]': " + PLAIN,
        {'specdec_hub_endpoint': 'http://[::ffff:10.0.0.5]'}),
    'hubep-http-0': Case(
        H + "specdec_hub_endpoint='http://0.0.0.0:8180': " + PLAIN,
        {'specdec_hub_endpoint': 'http://0.0.0.0:8180'}),
    'hubep-http-127-name': Case(
        H + "specdec_hub_endpoint='http://127.0.0.1.nip.io': " + PLAIN,
        {'specdec_hub_endpoint': 'http://127.0.0.1.nip.io'}),
    'hubep-semicolon': Case(
        H + "specdec_hub_endpoint='https://hub.example/a;access_log /tmp/x': " + PATH,
        {'specdec_hub_endpoint': 'https://hub.example/a;access_log /tmp/x'}),
    'hubep-space': Case(
        H + "specdec_hub_endpoint='https://hub.example/a b': " + PATH,
        {'specdec_hub_endpoint': 'https://hub.example/a b'}),
    'hubep-dollar': Case(
        H + "specdec_hub_endpoint='https://hub.example/$uri': " + PATH,
        {'specdec_hub_endpoint': 'https://hub.example/$uri'}),
    'hubep-quote': Case(
        H + 'specdec_hub_endpoint=\'https://hub.example/a"b\': ' + PATH,
        {'specdec_hub_endpoint': 'https://hub.example/a"b'}),
    'hubep-squote': Case(
        H + 'specdec_hub_endpoint="https://hub.example/a\'b": ' + PATH,
        {'specdec_hub_endpoint': "https://hub.example/a'b"}),
    'hubep-brace': Case(
        H + "specdec_hub_endpoint='https://hub.example/a{': " + PATH,
        {'specdec_hub_endpoint': 'https://hub.example/a{'}),
    'hubep-cbrace': Case(
        H + "specdec_hub_endpoint='https://hub.example/a}': " + PATH,
        {'specdec_hub_endpoint': 'https://hub.example/a}'}),
    'hubep-backslash': Case(
        H + "specdec_hub_endpoint='https://hub.example/a\\\\b': " + PATH,
        {'specdec_hub_endpoint': 'https://hub.example/a\\b'}),
    'hubep-tab': Case(
        H + "specdec_hub_endpoint='https://hub.example/a\\tb': " + CTRL + ' (U+0009)',
        {'specdec_hub_endpoint': 'https://hub.example/a\tb'}),
    'hubep-newline': Case(
        H + "specdec_hub_endpoint='https://hub.example/a\\nreturn 200;': " + CTRL + ' (U+000A)',
        {'specdec_hub_endpoint': 'https://hub.example/a\nreturn 200;'}),
    'hubep-pct-bad': Case(
        H + "specdec_hub_endpoint='https://hub.example/%zz': " + PATH,
        {'specdec_hub_endpoint': 'https://hub.example/%zz'}),
    'hubep-pct-short': Case(
        H + "specdec_hub_endpoint='https://hub.example/a%2': " + PATH,
        {'specdec_hub_endpoint': 'https://hub.example/a%2'}),
    'hubep-caret': Case(
        H + "specdec_hub_endpoint='https://hub.example/a^b': " + PATH,
        {'specdec_hub_endpoint': 'https://hub.example/a^b'}),
    'hubep-pipe': Case(
        H + "specdec_hub_endpoint='https://hub.example/a|b': " + PATH,
        {'specdec_hub_endpoint': 'https://hub.example/a|b'}),
    'hubep-lt': Case(
        H + "specdec_hub_endpoint='https://hub.example/<a>': " + PATH,
        {'specdec_hub_endpoint': 'https://hub.example/<a>'}),
    'hubep-backtick': Case(
        H + "specdec_hub_endpoint='https://hub.example/`id`': " + PATH,
        {'specdec_hub_endpoint': 'https://hub.example/`id`'}),
    'hubep-query': Case(
        H + "specdec_hub_endpoint='https://hub.example/a?x=1': " + NOT_URL,
        {'specdec_hub_endpoint': 'https://hub.example/a?x=1'}),
    'hubep-fragment': Case(
        H + "specdec_hub_endpoint='https://hub.example/a#f': " + NOT_URL,
        {'specdec_hub_endpoint': 'https://hub.example/a#f'}),
    'hubep-userinfo': Case(
        H
        + "specdec_hub_endpoint='https://<redacted>@hub.example': a URL with credentials "
        + '(user:password@); secrets do not belong in host data or a unit file',
        {'specdec_hub_endpoint': 'https://u:p@hub.example'}),
    'hubep-ftp': Case(
        H + "specdec_hub_endpoint='ftp://hub.example': " + NOT_URL,
        {'specdec_hub_endpoint': 'ftp://hub.example'}),
    'hubep-noscheme': Case(
        H + "specdec_hub_endpoint='hub.example': " + NOT_URL,
        {'specdec_hub_endpoint': 'hub.example'}),
    'hubep-port0': Case(
        H + "specdec_hub_endpoint='https://hub.example:0': port 0 is not in 1..65535",
        {'specdec_hub_endpoint': 'https://hub.example:0'}),
    'hubep-port-big': Case(
        H + "specdec_hub_endpoint='https://hub.example:70000': port 70000 is not in 1..65535",
        {'specdec_hub_endpoint': 'https://hub.example:70000'}),
    'hubep-trailing': Case(
        H + "specdec_hub_endpoint='https://hub.example/a/': drop the trailing '/'",
        {'specdec_hub_endpoint': 'https://hub.example/a/'}),
    'hubep-nul': Case(
        H + "specdec_hub_endpoint='https://hub.example/a\\x00': " + CTRL + ' (U+0000)',
        {'specdec_hub_endpoint': 'https://hub.example/a\x00'}),
    'hubep-token': Case(
        H + "specdec_hub_endpoint='https://hub.example/<redacted>': " + SECRET,
        {'specdec_hub_endpoint': 'https://hub.example/hf_Abc123Abc123Abc123Abc123Abc123'}),
    'hubep-unicode': Case(
        H + "specdec_hub_endpoint='https://hub.example/é': " + PATH,
        {'specdec_hub_endpoint': 'https://hub.example/é'}),
    'hubep-bidi': Case(
        H + "specdec_hub_endpoint='https://hub.example/a\\u202eb': " + CTRL + ' (U+202E)',
        {'specdec_hub_endpoint': 'https://hub.example/a\u202eb'}),
    'hubep-empty': Case(
        H + "specdec_hub_endpoint='': must be a non-empty string",
        {'specdec_hub_endpoint': ''}),
    'hubep-int': Case(
        H + 'specdec_hub_endpoint=8180: must be a string',
        {'specdec_hub_endpoint': 8180}),
    'hubup-http-lan': Case(
        H + "specdec_hub_upstream='http://10.0.0.5:8180': " + PLAIN,
        {'specdec_hub_upstream': 'http://10.0.0.5:8180'}, base=MIRROR),
    'hubup-http-name': Case(
        H + "specdec_hub_upstream='http://mirror.lan:8180': " + PLAIN,
        {'specdec_hub_upstream': 'http://mirror.lan:8180'}, base=MIRROR),
    'hubup-semicolon': Case(
        H + "specdec_hub_upstream='https://hub.example/a;access_log /tmp/x': " + PATH,
        {'specdec_hub_upstream': 'https://hub.example/a;access_log /tmp/x'}, base=MIRROR),
    'hubup-space': Case(
        H + "specdec_hub_upstream='https://hub.example/a b': " + PATH,
        {'specdec_hub_upstream': 'https://hub.example/a b'}, base=MIRROR),
    'hubup-dollar': Case(
        H + "specdec_hub_upstream='https://hub.example/$uri': " + PATH,
        {'specdec_hub_upstream': 'https://hub.example/$uri'}, base=MIRROR),
    'hubup-quote': Case(
        H + 'specdec_hub_upstream=\'https://hub.example/a"b\': ' + PATH,
        {'specdec_hub_upstream': 'https://hub.example/a"b'}, base=MIRROR),
    'hubup-brace': Case(
        H + "specdec_hub_upstream='https://hub.example/a{': " + PATH,
        {'specdec_hub_upstream': 'https://hub.example/a{'}, base=MIRROR),
    'hubup-newline': Case(
        H + "specdec_hub_upstream='https://hub.example/a\\nreturn 200;': " + CTRL + ' (U+000A)',
        {'specdec_hub_upstream': 'https://hub.example/a\nreturn 200;'}, base=MIRROR),
    'hubup-backslash': Case(
        H + "specdec_hub_upstream='https://hub.example/a\\\\b': " + PATH,
        {'specdec_hub_upstream': 'https://hub.example/a\\b'}, base=MIRROR),
    'hubup-pct-bad': Case(
        H + "specdec_hub_upstream='https://hub.example/%zz': " + PATH,
        {'specdec_hub_upstream': 'https://hub.example/%zz'}, base=MIRROR),
    'hubup-query': Case(
        H + "specdec_hub_upstream='https://hub.example/a?x=1': " + NOT_URL,
        {'specdec_hub_upstream': 'https://hub.example/a?x=1'}, base=MIRROR),
    'hubup-userinfo': Case(
        H
        + "specdec_hub_upstream='https://<redacted>@hub.example': a URL with credentials "
        + '(user:password@); secrets do not belong in host data or a unit file',
        {'specdec_hub_upstream': 'https://u:p@hub.example'}, base=MIRROR),
    'regup-http-lan': Case(
        H + "specdec_registry_upstreams.nvcr.io='http://10.0.0.5:8180': " + PLAIN,
        {'specdec_registry_upstreams': {'nvcr.io': 'http://10.0.0.5:8180'}}, base=MIRROR),
    'regup-http-v6': Case(
        H + "specdec_registry_upstreams.nvcr.io='http://[fd00::5]:8180': " + PLAIN,
        {'specdec_registry_upstreams': {'nvcr.io': 'http://[fd00::5]:8180'}}, base=MIRROR),
    'regup-semicolon': Case(
        H
        + "specdec_registry_upstreams.nvcr.io='https://hub.example/a;access_log /tmp/x': "
        + ''
        + PATH,
        {'specdec_registry_upstreams': {'nvcr.io': 'https://hub.example/a;access_log /tmp/x'}},
        base=MIRROR),
    'regup-space': Case(
        H + "specdec_registry_upstreams.nvcr.io='https://hub.example/a b': " + PATH,
        {'specdec_registry_upstreams': {'nvcr.io': 'https://hub.example/a b'}}, base=MIRROR),
    'regup-dollar': Case(
        H + "specdec_registry_upstreams.nvcr.io='https://hub.example/$uri': " + PATH,
        {'specdec_registry_upstreams': {'nvcr.io': 'https://hub.example/$uri'}}, base=MIRROR),
    'regup-squote': Case(
        H + 'specdec_registry_upstreams.nvcr.io="https://hub.example/a\'b": ' + PATH,
        {'specdec_registry_upstreams': {'nvcr.io': "https://hub.example/a'b"}}, base=MIRROR),
    'regup-cbrace': Case(
        H + "specdec_registry_upstreams.nvcr.io='https://hub.example/a}': " + PATH,
        {'specdec_registry_upstreams': {'nvcr.io': 'https://hub.example/a}'}}, base=MIRROR),
    'regup-tab': Case(
        H
        + "specdec_registry_upstreams.nvcr.io='https://hub.example/a\\tb': "
        + CTRL + ' (U+0009)',
        {'specdec_registry_upstreams': {'nvcr.io': 'https://hub.example/a\tb'}}, base=MIRROR),
    'regup-lt': Case(
        H + "specdec_registry_upstreams.nvcr.io='https://hub.example/<a>': " + PATH,
        {'specdec_registry_upstreams': {'nvcr.io': 'https://hub.example/<a>'}}, base=MIRROR),
    'regup-fragment': Case(
        H + "specdec_registry_upstreams.nvcr.io='https://hub.example/a#f': " + NOT_URL,
        {'specdec_registry_upstreams': {'nvcr.io': 'https://hub.example/a#f'}}, base=MIRROR),
    'regup-trailing': Case(
        H + "specdec_registry_upstreams.nvcr.io='https://hub.example/a/': drop the trailing '/'",
        {'specdec_registry_upstreams': {'nvcr.io': 'https://hub.example/a/'}}, base=MIRROR),
    'regup-ftp': Case(
        H + "specdec_registry_upstreams.nvcr.io='ftp://hub.example': " + NOT_URL,
        {'specdec_registry_upstreams': {'nvcr.io': 'ftp://hub.example'}}, base=MIRROR),
    'regup-list': Case(
        H
        + "specdec_registry_upstreams=['https://nvcr.io']: must be a mapping of registry "
        + 'host[:port] to its upstream URL',
        {'specdec_registry_upstreams': ['https://nvcr.io']}, base=MIRROR),
    'hubup-not-mirror': Case(
        H
        + "specdec_hub_upstream='https://hub.example': only applies with "
        + 'specdec_site_mirror: true',
        {'specdec_hub_upstream': 'https://hub.example'}),
    'tls-true': Case(H + 'specdec_tls=True: ' + TLS, {'specdec_tls': True}),
    'tls-str-off': Case(H + "specdec_tls='off': " + TLS, {'specdec_tls': 'off'}),
    'tls-zero': Case(H + 'specdec_tls=0: ' + TLS, {'specdec_tls': 0}),
    'tls-false-str': Case(H + "specdec_tls='false': " + TLS, {'specdec_tls': 'false'}),
    'tls-no': Case(H + "specdec_tls='no': " + TLS, {'specdec_tls': 'no'}),
    'scope-bad': Case(
        H + "specdec_api_key_scope='fleet': must be one of inventory, host",
        {'specdec_api_key_scope': 'fleet'}),
    'scope-int': Case(
        H + 'specdec_api_key_scope=1: must be a string',
        {'specdec_api_key_scope': 1}),
    'scope-newline': Case(
        H + "specdec_api_key_scope='host\\n': " + CTRL + ' (U+000A)',
        {'specdec_api_key_scope': 'host\n'}),
    'scope-upper': Case(
        H + "specdec_api_key_scope='HOST': must be one of inventory, host; did you mean host?",
        {'specdec_api_key_scope': 'HOST'}),
    'fwallow-list': Case(
        H + 'specdec_firewall_allow=[9100]: ' + FW,
        {'specdec_firewall_allow': [9100]}),
    'fwallow-str': Case(
        H + "specdec_firewall_allow='9100': " + FW,
        {'specdec_firewall_allow': '9100'}),
    'fwallow-empty': Case(H + 'specdec_firewall_allow={}: ' + FW, {'specdec_firewall_allow': {}}),
    'fwallow-port-str': Case(
        H + "specdec_firewall_allow.9100='9100': " + PORT,
        {'specdec_firewall_allow': {'9100': ['10.0.0.0/8']}}),
    'fwallow-port-0': Case(
        H + 'specdec_firewall_allow.0=0: ' + PORT,
        {'specdec_firewall_allow': {0: ['10.0.0.0/8']}}),
    'fwallow-port-big': Case(
        H + 'specdec_firewall_allow.70000=70000: ' + PORT,
        {'specdec_firewall_allow': {70000: ['10.0.0.0/8']}}),
    'fwallow-port-bool': Case(
        H + 'specdec_firewall_allow.True=True: ' + PORT,
        {'specdec_firewall_allow': {True: ['10.0.0.0/8']}}),
    'fwallow-nets-str': Case(
        H
        + "specdec_firewall_allow.9100='10.0.0.0/8': must be a non-empty list of "
        + 'networks (CIDR)',
        {'specdec_firewall_allow': {9100: '10.0.0.0/8'}}),
    'fwallow-nets-empty': Case(
        H + 'specdec_firewall_allow.9100=[]: must be a non-empty list of networks (CIDR)',
        {'specdec_firewall_allow': {9100: []}}),
    'fwallow-net-bad': Case(
        H + "specdec_firewall_allow.9100[0]='10.0.0.0/33': " + CIDR,
        {'specdec_firewall_allow': {9100: ['10.0.0.0/33']}}),
    'fwallow-net-host': Case(
        H + "specdec_firewall_allow.9100[0]='10.0.0.1/8': has host bits set",
        {'specdec_firewall_allow': {9100: ['10.0.0.1/8']}}),
    'fwallow-net-name': Case(
        H + "specdec_firewall_allow.9100[0]='lan.example': " + CIDR,
        {'specdec_firewall_allow': {9100: ['lan.example']}}),
    'fwallow-net-newline': Case(
        H + "specdec_firewall_allow.9100[0]='10.0.0.0/8\\n': " + CTRL + ' (U+000A)',
        {'specdec_firewall_allow': {9100: ['10.0.0.0/8\n']}}),
    'fwallow-net-wild': Case(
        H + "specdec_firewall_allow.9100[0]='*': " + CIDR,
        {'specdec_firewall_allow': {9100: ['*']}}),
    'fwallow-many': Case(
        H
        + "specdec_firewall_allow={9000: ['10.0.0.0/8'], 9001: ['10.0.0.0/8'], 9002: "
        + "['10.0.0.…: has 33 items (at most 32)",
        {'specdec_firewall_allow': {p: ['10.0.0.0/8'] for p in range(9000, 9033)}}),
    'fwallow-nets-many': Case(
        H
        + "specdec_firewall_allow.9100=['10.0.0.0/16', '10.1.0.0/16', '10.2.0.0/16', "
        + "'10.3.0.0/16',…: has 65 items (at most 64)",
        {'specdec_firewall_allow': {9100: [f'10.{i}.0.0/16' for i in range(65)]}}),
    'fwallow-port-neg': Case(
        H + 'specdec_firewall_allow.-1=-1: ' + PORT,
        {'specdec_firewall_allow': {-1: ['10.0.0.0/8']}}),
    'fwallow-port-float': Case(
        H + 'specdec_firewall_allow.9100.0=9100.0: ' + PORT,
        {'specdec_firewall_allow': {9100.0: ['10.0.0.0/8']}}),
    'fwallow-net-token': Case(
        H + "specdec_firewall_allow.9100[0]='<redacted>': " + SECRET,
        {'specdec_firewall_allow': {9100: [TOK]}}),
    'fwallow-net-int': Case(
        H + 'specdec_firewall_allow.9100[0]=10: must be a string',
        {'specdec_firewall_allow': {9100: [10]}}),
    'sshport-str': Case(H + "ssh_port='22': " + PORT, {'ssh_port': '22'}),
    'sshport-zero': Case(H + 'ssh_port=0: ' + PORT, {'ssh_port': 0}),
    'sshport-big': Case(H + 'ssh_port=65536: ' + PORT, {'ssh_port': 65536}),
    'sshport-bool': Case(H + 'ssh_port=True: ' + PORT, {'ssh_port': True}),
    'sshport-neg': Case(H + 'ssh_port=-22: ' + PORT, {'ssh_port': -22}),
    'sshport-float': Case(H + 'ssh_port=22.5: ' + PORT, {'ssh_port': 22.5}),
    'hubca-token': Case(
        H
        + 'specdec_hub_ca_file=<redacted>: must be a path to a file on the control node, '
        + 'not the secret itself',
        {'specdec_hub_ca_file': TOK}),
    'hubca-int': Case(H + 'specdec_hub_ca_file=5: must be a string', {'specdec_hub_ca_file': 5}),
    'hubca-newline': Case(
        H + "specdec_hub_ca_file='/a\\nb': " + CTRL + ' (U+000A)',
        {'specdec_hub_ca_file': '/a\nb'}),
    'hubca-empty': Case(
        H + "specdec_hub_ca_file='': must be a non-empty string",
        {'specdec_hub_ca_file': ''}),
    'hubca-long': Case(
        H
        + "specdec_hub_ca_file='/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa… "
        + '(5001 chars): is 5001 characters long (at most 4096)',
        {'specdec_hub_ca_file': '/' + 'a' * 5000}),
    'hubca-list': Case(
        H + "specdec_hub_ca_file=['/a']: must be a string",
        {'specdec_hub_ca_file': ['/a']}),
}
