"""The API proxy: nginx in front of the engine, the only thing that serves the OpenAI API to the
network, and only with the fleet's key (pure rendering).

Why a proxy: no engine's own key covers every route that reaches the model. vLLM checks
``--api-key`` / ``VLLM_API_KEY`` only under ``/v1`` (0.9.2-0.19.0) or ``/v1``, ``/v2``,
``/inference``, ``/cohere`` (0.31.0), and ``/invocations`` (full inference), ``/metrics``,
``/tokenize`` stay open (vLLM 0.31.0 vllm/entrypoints/launchers/cli_args.py:320-327, "Do not
rely on --api-key alone"; docs/usage/security.md); trtllm-serve has no key or TLS option
(tensorrt_llm/commands/serve.py: ``--host``, ``--port``, no auth; NVIDIA/TensorRT-LLM#9950,
"it won't be available anytime soon"); the Dynamo frontend implements no client
authentication ("that is the gateway's responsibility", Dynamo secure-deployment guidelines).
So the engine listens on 127.0.0.1 only and nginx (Debian/Ubuntu package ``nginx``) answers
every route on the host's API port: ``401`` without ``Authorization: Bearer <key>``, else the
request proxied unbuffered (server-sent events stream through as they come). The keys are
systemd credentials (the fleet's, and after ``specdec keys rotate`` the one being retired,
accepted too until ``specdec keys retire``); ``ExecStartPre`` writes the ``map`` nginx compares
with into the unit's runtime directory (0700, the service user's), so no key is in a file of
the release, an argv or a log. It serves HTTPS (TLS 1.2/1.3) with a certificate of the
inventory's CA (`specdec.config.pki`; ``specdec keys ca`` prints it for clients), or the
operator's (``specdec_tls: {cert, key}``); plain HTTP only with ``specdec_tls: false``.
Every value written into the configuration is quoted (`specdec.render.nginx.quote`).
"""

from __future__ import annotations

import hashlib

from specdec.engines.base import LOOPBACK
from specdec.host import layout
from specdec.plan.types import ANY_NETWORK, Plan
from specdec.render import sandbox
from specdec.render.nginx import quote
from specdec.render.unitfile import exec_line, template

__all__ = ["KEY_CREDENTIAL", "NGINX", "OLD_KEY_CREDENTIAL", "RUN_DIR", "TLS_CERT", "TLS_KEY",
           "config", "config_name", "unit"]

NGINX = "/usr/sbin/nginx"
RUN_DIR = f"/run/{layout.PROXY_SERVICE}"
KEY_CREDENTIAL = "api_key"
OLD_KEY_CREDENTIAL = "api_key.old"  # empty when no key is being retired
TLS_CERT, TLS_KEY = "api.crt", "api.key"  # credential names (files under PROXY_TLS_DIR)
_CREDS = f"/run/credentials/{layout.PROXY_SERVICE}.service"  # $CREDENTIALS_DIRECTORY


def _listen(address: str, port: int, tls: bool) -> str:
    ssl = " ssl" if tls else ""
    if address == "::":
        return f"listen {quote(f'[::]:{port}')}{ssl} ipv6only=off;"
    host = f"[{address}]" if ":" in address else address
    return f"listen {quote(f'{host}:{port}')}{ssl};"


def config(plan: Plan) -> str:
    """nginx.conf of the proxy (no secret in it: the key map is included from the runtime
    directory)."""
    listens = [_listen(plan.listen, plan.port, plan.tls)]
    if plan.listen not in ("0.0.0.0", "::", LOOPBACK):
        listens.append(_listen(LOOPBACK, plan.port, plan.tls))
    tls = (f"\t\tssl_certificate {quote(f'{_CREDS}/{TLS_CERT}')};\n"
           f"\t\tssl_certificate_key {quote(f'{_CREDS}/{TLS_KEY}')};\n"
           "\t\tssl_protocols TLSv1.2 TLSv1.3;\n") if plan.tls else ""
    temp = "".join(f"\t{k}_temp_path {quote(f'{RUN_DIR}/{k}')};\n"
                   for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return (
        f"# Managed by specdec: the API proxy of {plan.host} (release file; no secret in it).\n"
        "worker_processes 1;\n"
        "daemon off;\n"
        f"pid {quote(RUN_DIR + '/nginx.pid')};\n"
        "error_log stderr warn;\n"
        "events { worker_connections 1024; }\n"
        "http {\n"
        "\taccess_log off;\n"
        "\tserver_tokens off;\n"
        "\tdefault_type application/json;\n"
        f"{temp}"
        f"\tinclude {quote(RUN_DIR + '/key.conf')};\n"
        "\tupstream engine {\n"
        f"\t\tserver {quote(f'{LOOPBACK}:{plan.engine_port}')};\n"
        "\t\tkeepalive 16;\n"
        "\t}\n"
        "\tserver {\n"
        + "".join(f"\t\t{ln}\n" for ln in listens) + tls +
        "\t\tclient_max_body_size 32m;\n"
        "\t\tlocation / {\n"
        "\t\t\tif ($specdec_key_ok = 0) {\n"
        "\t\t\t\tadd_header WWW-Authenticate Bearer always;\n"
        "\t\t\t\treturn 401 '{\"error\": \"Unauthorized\"}';\n"
        "\t\t\t}\n"
        "\t\t\tproxy_pass http://engine;\n"
        "\t\t\tproxy_http_version 1.1;\n"
        "\t\t\tproxy_set_header Connection \"\";\n"
        "\t\t\tproxy_buffering off;\n"
        "\t\t\tproxy_request_buffering off;\n"
        "\t\t\tproxy_read_timeout 3600s;\n"
        "\t\t\tproxy_send_timeout 3600s;\n"
        "\t\t}\n"
        "\t}\n"
        "}\n"
    )


def config_name(text: str) -> str:
    """Named by content: the unit names it, so it changes exactly when the config does."""
    return f"proxy-{hashlib.sha256(text.encode()).hexdigest()[:12]}.conf"


def _key_map_script() -> str:
    """ExecStartPre: the credentials' keys (the fleet's; the one being retired, if any: its
    credential is empty otherwise), each checked against the grammar before anything is
    written, as the nginx ``map`` the config includes (in the runtime directory, 0600)."""
    # the key's grammar (`specdec.config.apikey`: sdk_ and 20-200 letters and digits), so nothing in
    # it means anything to nginx or sh (and word splitting below cannot split one)
    bad = "{ echo 'specdec-proxy: an API key credential is empty or malformed' >&2; exit 1; }"
    return (
        "set -e; umask 077; d=\"$CREDENTIALS_DIRECTORY\"; "
        f"new=$(cat \"$d/{KEY_CREDENTIAL}\"); old=$(cat \"$d/{OLD_KEY_CREDENTIAL}\"); "
        f"[ -n \"$new\" ] || {bad}; "
        "for k in \"$new\" ${old:+\"$old\"}; do "
        f"case \"$k\" in sdk_*) ;; *) {bad} ;; esac; "
        f"case \"$k\" in *[!A-Za-z0-9_]*) {bad} ;; esac; "
        f"[ ${{#k}} -ge 24 ] && [ ${{#k}} -le 204 ] || {bad}; done; "
        # a map's plain strings match any case (nginx ngx_http_map_module): a case-sensitive
        # regex, anchored (the key has no character special to it)
        "{ printf 'map $http_authorization $specdec_key_ok {\\n\\tdefault 0;\\n'; "
        "for k in $new $old; do printf '\\t\"~^Bearer %s$\" 1;\\n' \"$k\"; done; "
        "printf '}\\n'; } > \"$RUNTIME_DIRECTORY/key.conf\""
    )


def unit(plan: Plan, name: str) -> str:
    conf = f"{layout.CURRENT}/{name}"
    nginx = [NGINX, "-p", RUN_DIR, "-c", conf]
    creds = [(KEY_CREDENTIAL, layout.API_KEY_FILE), (OLD_KEY_CREDENTIAL, layout.API_KEY_OLD_FILE)]
    if plan.tls:
        creds += [(TLS_CERT, f"{layout.PROXY_TLS_DIR}/{TLS_CERT}"),
                  (TLS_KEY, f"{layout.PROXY_TLS_DIR}/{TLS_KEY}")]
    peers = None if set(plan.allow_from) >= set(ANY_NETWORK) else plan.allow_from
    return template(
        "specdec-proxy.service.j2", plan=plan,
        runtime_dir=layout.PROXY_SERVICE, firewall=layout.FIREWALL_SERVICE,
        credentials=[f"{n}:{p}" for n, p in creds],
        pre=exec_line(["/bin/sh", "-c", _key_map_script()]),
        exec_start=exec_line(nginx), exec_reload=exec_line([*nginx, "-s", "reload"]),
        sandbox=sandbox.service(peers=peers))
