"""The bad-input corpus, network part 2 (issue 29): the Hub endpoint, the site mirror's upstreams
and registries (https only, but to the host's own loopback; URL paths in RFC 3986 without ';',
'$', quotes: nothing that could become nginx directives), the API's TLS and key scope, the
firewall's own openings, the SSH port it keeps, a private Hub's CA file."""

from __future__ import annotations

from tests.deploy.corpus_base import CTRL, SECRET, TOK, VLLM, Case, H, bad

# a site mirror host: the mirror-only keys apply
MIRROR = {**VLLM, "specdec_site": "s1", "specdec_site_mirror": True}
PLAIN = (
    "plain http:// only to this host's own loopback (127.0.0.1, [::1], localhost): on a "
    "network anyone can read and change what it carries (the token, the files); use "
    "https://"
)
PATH = (
    "the URL's path may hold only letters, digits, '/', '-._~!&()*+,=:@' and %XX escapes "
    "(RFC 3986 without ';', '$' or quotes)"
)
NOT_URL = "not an https:// URL (https://host[:port][/path], no query)"
TLS = "must be false or a mapping {cert: PATH, key: PATH} (PEM files on the control node)"
FW = "must be a mapping of TCP port to a list of networks, e.g. {9100: ['10.0.0.0/8']}"
PORT = "must be an integer in 1..65535"
CIDR = "is not a network in CIDR notation (e.g. 10.0.0.0/8)"

CASES: dict[str, Case] = {
    "hubep-http-lan": bad("specdec_hub_endpoint", "http://10.0.0.5:8180", PLAIN),
    "hubep-http-name": bad("specdec_hub_endpoint", "http://mirror.lan:8180", PLAIN),
    "hubep-http-v6": bad("specdec_hub_endpoint", "http://[fd00::5]:8180", PLAIN),
    "hubep-http-mapped": bad("specdec_hub_endpoint", "http://[::ffff:10.0.0.5]", PLAIN),
    "hubep-http-0": bad("specdec_hub_endpoint", "http://0.0.0.0:8180", PLAIN),
    "hubep-http-127-name": bad("specdec_hub_endpoint", "http://127.0.0.1.nip.io", PLAIN),
    "hubep-semicolon": bad("specdec_hub_endpoint", "https://hub.example/a;access_log /tmp/x", PATH),
    "hubep-space": bad("specdec_hub_endpoint", "https://hub.example/a b", PATH),
    "hubep-dollar": bad("specdec_hub_endpoint", "https://hub.example/$uri", PATH),
    "hubep-quote": bad("specdec_hub_endpoint", 'https://hub.example/a"b', PATH),
    "hubep-squote": bad("specdec_hub_endpoint", "https://hub.example/a'b", PATH),
    "hubep-brace": bad("specdec_hub_endpoint", "https://hub.example/a{", PATH),
    "hubep-cbrace": bad("specdec_hub_endpoint", "https://hub.example/a}", PATH),
    "hubep-backslash": bad("specdec_hub_endpoint", "https://hub.example/a\\b", PATH),
    "hubep-tab": bad("specdec_hub_endpoint", "https://hub.example/a\tb", CTRL + " (U+0009)"),
    "hubep-newline": bad(
        "specdec_hub_endpoint", "https://hub.example/a\nreturn 200;", CTRL + " (U+000A)"
    ),
    "hubep-pct-bad": bad("specdec_hub_endpoint", "https://hub.example/%zz", PATH),
    "hubep-pct-short": bad("specdec_hub_endpoint", "https://hub.example/a%2", PATH),
    "hubep-caret": bad("specdec_hub_endpoint", "https://hub.example/a^b", PATH),
    "hubep-pipe": bad("specdec_hub_endpoint", "https://hub.example/a|b", PATH),
    "hubep-lt": bad("specdec_hub_endpoint", "https://hub.example/<a>", PATH),
    "hubep-backtick": bad("specdec_hub_endpoint", "https://hub.example/`id`", PATH),
    "hubep-query": bad("specdec_hub_endpoint", "https://hub.example/a?x=1", NOT_URL),
    "hubep-fragment": bad("specdec_hub_endpoint", "https://hub.example/a#f", NOT_URL),
    "hubep-userinfo": Case(
        H
        + "specdec_hub_endpoint='https://<redacted>@hub.example': a URL with credentials "
        + "(user:password@); secrets do not belong in host data or a unit file",
        {"specdec_hub_endpoint": "https://u:p@hub.example"},
    ),
    "hubep-ftp": bad("specdec_hub_endpoint", "ftp://hub.example", NOT_URL),
    "hubep-noscheme": bad("specdec_hub_endpoint", "hub.example", NOT_URL),
    "hubep-port0": bad(
        "specdec_hub_endpoint", "https://hub.example:0", "port 0 is not in 1..65535"
    ),
    "hubep-port-big": bad(
        "specdec_hub_endpoint", "https://hub.example:70000", "port 70000 is not in 1..65535"
    ),
    "hubep-trailing": bad(
        "specdec_hub_endpoint", "https://hub.example/a/", "drop the trailing '/'"
    ),
    "hubep-nul": bad("specdec_hub_endpoint", "https://hub.example/a\x00", CTRL + " (U+0000)"),
    "hubep-token": Case(
        H + "specdec_hub_endpoint='https://hub.example/<redacted>': " + SECRET,
        {"specdec_hub_endpoint": "https://hub.example/hf_Abc123Abc123Abc123Abc123Abc123"},
    ),
    "hubep-unicode": bad("specdec_hub_endpoint", "https://hub.example/é", PATH),
    "hubep-bidi": bad("specdec_hub_endpoint", "https://hub.example/a\u202eb", CTRL + " (U+202E)"),
    "hubep-empty": bad("specdec_hub_endpoint", "", "must be a non-empty string"),
    "hubep-int": bad("specdec_hub_endpoint", 8180, "must be a string"),
    "hubup-http-lan": bad("specdec_hub_upstream", "http://10.0.0.5:8180", PLAIN, MIRROR),
    "hubup-http-name": bad("specdec_hub_upstream", "http://mirror.lan:8180", PLAIN, MIRROR),
    "hubup-semicolon": bad(
        "specdec_hub_upstream", "https://hub.example/a;access_log /tmp/x", PATH, MIRROR
    ),
    "hubup-space": bad("specdec_hub_upstream", "https://hub.example/a b", PATH, MIRROR),
    "hubup-dollar": bad("specdec_hub_upstream", "https://hub.example/$uri", PATH, MIRROR),
    "hubup-quote": bad("specdec_hub_upstream", 'https://hub.example/a"b', PATH, MIRROR),
    "hubup-brace": bad("specdec_hub_upstream", "https://hub.example/a{", PATH, MIRROR),
    "hubup-newline": bad(
        "specdec_hub_upstream", "https://hub.example/a\nreturn 200;", CTRL + " (U+000A)", MIRROR
    ),
    "hubup-backslash": bad("specdec_hub_upstream", "https://hub.example/a\\b", PATH, MIRROR),
    "hubup-pct-bad": bad("specdec_hub_upstream", "https://hub.example/%zz", PATH, MIRROR),
    "hubup-query": bad("specdec_hub_upstream", "https://hub.example/a?x=1", NOT_URL, MIRROR),
    "hubup-userinfo": Case(
        H
        + "specdec_hub_upstream='https://<redacted>@hub.example': a URL with credentials "
        + "(user:password@); secrets do not belong in host data or a unit file",
        {"specdec_hub_upstream": "https://u:p@hub.example"},
        base=MIRROR,
    ),
    "regup-http-lan": bad(
        "specdec_registry_upstreams.nvcr.io", "http://10.0.0.5:8180", PLAIN, MIRROR
    ),
    "regup-http-v6": bad(
        "specdec_registry_upstreams.nvcr.io", "http://[fd00::5]:8180", PLAIN, MIRROR
    ),
    "regup-semicolon": bad(
        "specdec_registry_upstreams.nvcr.io",
        "https://hub.example/a;access_log /tmp/x",
        PATH,
        MIRROR,
    ),
    "regup-space": bad(
        "specdec_registry_upstreams.nvcr.io", "https://hub.example/a b", PATH, MIRROR
    ),
    "regup-dollar": bad(
        "specdec_registry_upstreams.nvcr.io", "https://hub.example/$uri", PATH, MIRROR
    ),
    "regup-squote": bad(
        "specdec_registry_upstreams.nvcr.io", "https://hub.example/a'b", PATH, MIRROR
    ),
    "regup-cbrace": bad(
        "specdec_registry_upstreams.nvcr.io", "https://hub.example/a}", PATH, MIRROR
    ),
    "regup-tab": bad(
        "specdec_registry_upstreams.nvcr.io", "https://hub.example/a\tb", CTRL + " (U+0009)", MIRROR
    ),
    "regup-lt": bad("specdec_registry_upstreams.nvcr.io", "https://hub.example/<a>", PATH, MIRROR),
    "regup-fragment": bad(
        "specdec_registry_upstreams.nvcr.io", "https://hub.example/a#f", NOT_URL, MIRROR
    ),
    "regup-trailing": bad(
        "specdec_registry_upstreams.nvcr.io",
        "https://hub.example/a/",
        "drop the trailing '/'",
        MIRROR,
    ),
    "regup-ftp": bad("specdec_registry_upstreams.nvcr.io", "ftp://hub.example", NOT_URL, MIRROR),
    "regup-list": bad(
        "specdec_registry_upstreams",
        ["https://nvcr.io"],
        "must be a mapping of registry host[:port] to its upstream URL",
        MIRROR,
    ),
    "hubup-not-mirror": bad(
        "specdec_hub_upstream", "https://hub.example", "only applies with specdec_site_mirror: true"
    ),
    "tls-true": bad("specdec_tls", True, TLS),
    "tls-str-off": bad("specdec_tls", "off", TLS),
    "tls-zero": bad("specdec_tls", 0, TLS),
    "tls-false-str": bad("specdec_tls", "false", TLS),
    "tls-no": bad("specdec_tls", "no", TLS),
    "scope-bad": bad("specdec_api_key_scope", "fleet", "must be one of inventory, host"),
    "scope-int": bad("specdec_api_key_scope", 1, "must be a string"),
    "scope-newline": bad("specdec_api_key_scope", "host\n", CTRL + " (U+000A)"),
    "scope-upper": bad(
        "specdec_api_key_scope", "HOST", "must be one of inventory, host; did you mean host?"
    ),
    "fwallow-list": bad("specdec_firewall_allow", [9100], FW),
    "fwallow-str": bad("specdec_firewall_allow", "9100", FW),
    "fwallow-empty": bad("specdec_firewall_allow", {}, FW),
    "fwallow-port-str": Case(
        H + "specdec_firewall_allow.9100='9100': " + PORT,
        {"specdec_firewall_allow": {"9100": ["10.0.0.0/8"]}},
    ),
    "fwallow-port-0": Case(
        H + "specdec_firewall_allow.0=0: " + PORT, {"specdec_firewall_allow": {0: ["10.0.0.0/8"]}}
    ),
    "fwallow-port-big": Case(
        H + "specdec_firewall_allow.70000=70000: " + PORT,
        {"specdec_firewall_allow": {70000: ["10.0.0.0/8"]}},
    ),
    "fwallow-port-bool": Case(
        H + "specdec_firewall_allow.True=True: " + PORT,
        {"specdec_firewall_allow": {True: ["10.0.0.0/8"]}},
    ),
    "fwallow-nets-str": Case(
        H
        + "specdec_firewall_allow.9100='10.0.0.0/8': must be a non-empty list of "
        + "networks (CIDR)",
        {"specdec_firewall_allow": {9100: "10.0.0.0/8"}},
    ),
    "fwallow-nets-empty": Case(
        H + "specdec_firewall_allow.9100=[]: must be a non-empty list of networks (CIDR)",
        {"specdec_firewall_allow": {9100: []}},
    ),
    "fwallow-net-bad": Case(
        H + "specdec_firewall_allow.9100[0]='10.0.0.0/33': " + CIDR,
        {"specdec_firewall_allow": {9100: ["10.0.0.0/33"]}},
    ),
    "fwallow-net-host": Case(
        H + "specdec_firewall_allow.9100[0]='10.0.0.1/8': has host bits set",
        {"specdec_firewall_allow": {9100: ["10.0.0.1/8"]}},
    ),
    "fwallow-net-name": Case(
        H + "specdec_firewall_allow.9100[0]='lan.example': " + CIDR,
        {"specdec_firewall_allow": {9100: ["lan.example"]}},
    ),
    "fwallow-net-newline": Case(
        H + "specdec_firewall_allow.9100[0]='10.0.0.0/8\\n': " + CTRL + " (U+000A)",
        {"specdec_firewall_allow": {9100: ["10.0.0.0/8\n"]}},
    ),
    "fwallow-net-wild": Case(
        H + "specdec_firewall_allow.9100[0]='*': " + CIDR, {"specdec_firewall_allow": {9100: ["*"]}}
    ),
    "fwallow-many": Case(
        H
        + "specdec_firewall_allow={9000: ['10.0.0.0/8'], 9001: ['10.0.0.0/8'], 9002: "
        + "['10.0.0.…: has 33 items (at most 32)",
        {"specdec_firewall_allow": {p: ["10.0.0.0/8"] for p in range(9000, 9033)}},
    ),
    "fwallow-nets-many": Case(
        H
        + "specdec_firewall_allow.9100=['10.0.0.0/16', '10.1.0.0/16', '10.2.0.0/16', "
        + "'10.3.0.0/16',…: has 65 items (at most 64)",
        {"specdec_firewall_allow": {9100: [f"10.{i}.0.0/16" for i in range(65)]}},
    ),
    "fwallow-port-neg": Case(
        H + "specdec_firewall_allow.-1=-1: " + PORT,
        {"specdec_firewall_allow": {-1: ["10.0.0.0/8"]}},
    ),
    "fwallow-port-float": Case(
        H + "specdec_firewall_allow.9100.0=9100.0: " + PORT,
        {"specdec_firewall_allow": {9100.0: ["10.0.0.0/8"]}},
    ),
    "fwallow-net-token": Case(
        H + "specdec_firewall_allow.9100[0]='<redacted>': " + SECRET,
        {"specdec_firewall_allow": {9100: [TOK]}},
    ),
    "fwallow-net-int": Case(
        H + "specdec_firewall_allow.9100[0]=10: must be a string",
        {"specdec_firewall_allow": {9100: [10]}},
    ),
    "sshport-str": bad("ssh_port", "22", PORT),
    "sshport-zero": bad("ssh_port", 0, PORT),
    "sshport-big": bad("ssh_port", 65536, PORT),
    "sshport-bool": bad("ssh_port", True, PORT),
    "sshport-neg": bad("ssh_port", -22, PORT),
    "sshport-float": bad("ssh_port", 22.5, PORT),
    "hubca-token": Case(
        H
        + "specdec_hub_ca_file=<redacted>: must be a path to a file on the control node, "
        + "not the secret itself",
        {"specdec_hub_ca_file": TOK},
    ),
    "hubca-int": bad("specdec_hub_ca_file", 5, "must be a string"),
    "hubca-newline": bad("specdec_hub_ca_file", "/a\nb", CTRL + " (U+000A)"),
    "hubca-empty": bad("specdec_hub_ca_file", "", "must be a non-empty string"),
    "hubca-long": Case(
        H
        + "specdec_hub_ca_file='/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa… "
        + "(5001 chars): is 5001 characters long (at most 4096)",
        {"specdec_hub_ca_file": "/" + "a" * 5000},
    ),
    "hubca-list": bad("specdec_hub_ca_file", ["/a"], "must be a string"),
}
