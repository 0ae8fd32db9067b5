"""The bad-input corpus, part 3 (issue 17): the reserved environment (interpreter, loader and
TLS-store hooks, what specdec and Dynamo set) and credentials in URLs."""

from __future__ import annotations

from tests.deploy.corpus_base import DYN, Case, H

CASES: dict[str, Case] = {
    'env-bash-env': Case(
        H +
        "specdec_env.BASH_ENV='x': BASH_ENV is reserved (managed by "
        'specdec, or it changes where the engine loads code, weights '
        'or the token from)',
        {'specdec_env': {'BASH_ENV': 'x'}}),
    'env-env': Case(
        H +
        "specdec_env.ENV='x': ENV is reserved (managed by specdec, or "
        'it changes where the engine loads code, weights or the token from)',
        {'specdec_env': {'ENV': 'x'}}),
    'env-home': Case(
        H +
        "specdec_env.HOME='x': HOME is reserved (managed by specdec, "
        'or it changes where the engine loads code, weights or the token from)',
        {'specdec_env': {'HOME': 'x'}}),
    'env-pythonsafepath': Case(
        H +
        "specdec_env.PYTHONSAFEPATH='x': PYTHONSAFEPATH is reserved "
        '(managed by specdec, or it changes where the engine loads '
        'code, weights or the token from)',
        {'specdec_env': {'PYTHONSAFEPATH': 'x'}}),
    'env-pythonwarnings': Case(
        H +
        "specdec_env.PYTHONWARNINGS='x': PYTHONWARNINGS is reserved "
        '(managed by specdec, or it changes where the engine loads '
        'code, weights or the token from)',
        {'specdec_env': {'PYTHONWARNINGS': 'x'}}),
    'env-pythonuserbase': Case(
        H +
        "specdec_env.PYTHONUSERBASE='x': PYTHONUSERBASE is reserved "
        '(managed by specdec, or it changes where the engine loads '
        'code, weights or the token from)',
        {'specdec_env': {'PYTHONUSERBASE': 'x'}}),
    'env-ssl-cert-file': Case(
        H +
        "specdec_env.SSL_CERT_FILE='x': SSL_CERT_FILE is reserved "
        '(managed by specdec, or it changes where the engine loads '
        'code, weights or the token from)',
        {'specdec_env': {'SSL_CERT_FILE': 'x'}}),
    'env-ssl-cert-dir': Case(
        H +
        "specdec_env.SSL_CERT_DIR='x': SSL_CERT_DIR is reserved "
        '(managed by specdec, or it changes where the engine loads '
        'code, weights or the token from)',
        {'specdec_env': {'SSL_CERT_DIR': 'x'}}),
    'env-openssl-conf': Case(
        H +
        "specdec_env.OPENSSL_CONF='x': OPENSSL_CONF is reserved "
        '(managed by specdec, or it changes where the engine loads '
        'code, weights or the token from)',
        {'specdec_env': {'OPENSSL_CONF': 'x'}}),
    'env-glibc-tunables': Case(
        H +
        "specdec_env.GLIBC_TUNABLES='x': GLIBC_TUNABLES is reserved "
        '(managed by specdec, or it changes where the engine loads '
        'code, weights or the token from)',
        {'specdec_env': {'GLIBC_TUNABLES': 'x'}}),
    'env-node-options': Case(
        H +
        "specdec_env.NODE_OPTIONS='x': NODE_OPTIONS is reserved "
        '(managed by specdec, or it changes where the engine loads '
        'code, weights or the token from)',
        {'specdec_env': {'NODE_OPTIONS': 'x'}}),
    'env-requests-ca-bundle': Case(
        H +
        "specdec_env.REQUESTS_CA_BUNDLE='x': REQUESTS_CA_BUNDLE is "
        'reserved (managed by specdec, or it changes where the engine '
        'loads code, weights or the token from)',
        {'specdec_env': {'REQUESTS_CA_BUNDLE': 'x'}}),
    'env-curl-ca-bundle': Case(
        H +
        "specdec_env.CURL_CA_BUNDLE='x': CURL_CA_BUNDLE is reserved "
        '(managed by specdec, or it changes where the engine loads '
        'code, weights or the token from)',
        {'specdec_env': {'CURL_CA_BUNDLE': 'x'}}),
    'env-transformers-cache': Case(
        H +
        "specdec_env.TRANSFORMERS_CACHE='x': TRANSFORMERS_CACHE is "
        'reserved (managed by specdec, or it changes where the engine '
        'loads code, weights or the token from)',
        {'specdec_env': {'TRANSFORMERS_CACHE': 'x'}}),
    'env-transformers-offline': Case(
        H +
        "specdec_env.TRANSFORMERS_OFFLINE='x': TRANSFORMERS_OFFLINE is "
        'reserved (managed by specdec, or it changes where the engine '
        'loads code, weights or the token from)',
        {'specdec_env': {'TRANSFORMERS_OFFLINE': 'x'}}),
    'env-ld-audit': Case(
        H +
        "specdec_env.LD_AUDIT='x': LD_AUDIT is reserved (managed by "
        'specdec, or it changes where the engine loads code, weights '
        'or the token from)',
        {'specdec_env': {'LD_AUDIT': 'x'}}),
    'env-vllm-server-dev-mode': Case(
        H +
        "specdec_env.VLLM_SERVER_DEV_MODE='x': VLLM_SERVER_DEV_MODE is "
        'reserved (managed by specdec, or it changes where the engine '
        'loads code, weights or the token from)',
        {'specdec_env': {'VLLM_SERVER_DEV_MODE': 'x'}}),
    'env-tiktoken-encodings-base': Case(
        H +
        'specdec_env.TIKTOKEN_ENCODINGS_BASE: looks like a secret '
        '(contains TOKEN); secrets do not belong in host data (the HF '
        'token goes to specdec_hf_token_file)',
        {'specdec_env': {'TIKTOKEN_ENCODINGS_BASE': 'x'}}),
    'env-gconv-path': Case(
        H +
        "specdec_env.GCONV_PATH='x': GCONV_PATH is reserved (managed "
        'by specdec, or it changes where the engine loads code, '
        'weights or the token from)',
        {'specdec_env': {'GCONV_PATH': 'x'}}),
    'env-perl5lib': Case(
        H +
        "specdec_env.PERL5LIB='x': PERL5LIB is reserved (managed by "
        'specdec, or it changes where the engine loads code, weights '
        'or the token from)',
        {'specdec_env': {'PERL5LIB': 'x'}}),
    'env-credentials-directory': Case(
        H +
        "specdec_env.CREDENTIALS_DIRECTORY='x': CREDENTIALS_DIRECTORY "
        'is reserved (managed by specdec, or it changes where the '
        'engine loads code, weights or the token from)',
        {'specdec_env': {'CREDENTIALS_DIRECTORY': 'x'}}),
    'env-notify-socket': Case(
        H +
        "specdec_env.NOTIFY_SOCKET='x': NOTIFY_SOCKET is reserved "
        '(managed by specdec, or it changes where the engine loads '
        'code, weights or the token from)',
        {'specdec_env': {'NOTIFY_SOCKET': 'x'}}),
    'env-runtime-directory': Case(
        H +
        "specdec_env.RUNTIME_DIRECTORY='x': RUNTIME_DIRECTORY is "
        'reserved (managed by specdec, or it changes where the engine '
        'loads code, weights or the token from)',
        {'specdec_env': {'RUNTIME_DIRECTORY': 'x'}}),
    'env-ifs': Case(
        H +
        "specdec_env.IFS='x': IFS is reserved (managed by specdec, or "
        'it changes where the engine loads code, weights or the token from)',
        {'specdec_env': {'IFS': 'x'}}),
    'env-shell': Case(
        H +
        "specdec_env.SHELL='x': SHELL is reserved (managed by specdec, "
        'or it changes where the engine loads code, weights or the token from)',
        {'specdec_env': {'SHELL': 'x'}}),
    'env-vllm-api-key': Case(
        H +
        'specdec_env.VLLM_API_KEY: looks like a secret (contains KEY); '
        'secrets do not belong in host data (the HF token goes to '
        'specdec_hf_token_file)',
        {'specdec_env': {'VLLM_API_KEY': 'x'}}),
    'dynenv-dyn-system-enabled': Case(
        H +
        "specdec_env.DYN_SYSTEM_ENABLED='x': DYN_SYSTEM_ENABLED is "
        'reserved (managed by specdec, or it changes where the engine '
        'loads code, weights or the token from)',
        {'specdec_env': {'DYN_SYSTEM_ENABLED': 'x'}}, base=DYN),
    'dynenv-dyn-system-host': Case(
        H +
        "specdec_env.DYN_SYSTEM_HOST='x': DYN_SYSTEM_HOST is reserved "
        '(managed by specdec, or it changes where the engine loads '
        'code, weights or the token from)',
        {'specdec_env': {'DYN_SYSTEM_HOST': 'x'}}, base=DYN),
    'dynenv-dyn-tcp-rpc-port': Case(
        H +
        "specdec_env.DYN_TCP_RPC_PORT='x': DYN_TCP_RPC_PORT is "
        'reserved (managed by specdec, or it changes where the engine '
        'loads code, weights or the token from)',
        {'specdec_env': {'DYN_TCP_RPC_PORT': 'x'}}, base=DYN),
    'dynenv-dyn-http-host': Case(
        H +
        "specdec_env.DYN_HTTP_HOST='x': DYN_HTTP_HOST is reserved "
        '(managed by specdec, or it changes where the engine loads '
        'code, weights or the token from)',
        {'specdec_env': {'DYN_HTTP_HOST': 'x'}}, base=DYN),
    'dynenv-dyn-tls-cert-path': Case(
        H +
        "specdec_env.DYN_TLS_CERT_PATH='x': DYN_TLS_CERT_PATH is "
        'reserved (managed by specdec, or it changes where the engine '
        'loads code, weights or the token from)',
        {'specdec_env': {'DYN_TLS_CERT_PATH': 'x'}}, base=DYN),
    'dynenv-etcd-endpoints': Case(
        H +
        "specdec_env.ETCD_ENDPOINTS='x': ETCD_ENDPOINTS is reserved "
        '(managed by specdec, or it changes where the engine loads '
        'code, weights or the token from)',
        {'specdec_env': {'ETCD_ENDPOINTS': 'x'}}, base=DYN),
    'dynenv-etcd-auth-ca': Case(
        H +
        "specdec_env.ETCD_AUTH_CA='x': ETCD_AUTH_CA is reserved "
        '(managed by specdec, or it changes where the engine loads '
        'code, weights or the token from)',
        {'specdec_env': {'ETCD_AUTH_CA': 'x'}}, base=DYN),
    'dynenv-etcd-auth-username': Case(
        H +
        "specdec_env.ETCD_AUTH_USERNAME='x': ETCD_AUTH_USERNAME is "
        'reserved (managed by specdec, or it changes where the engine '
        'loads code, weights or the token from)',
        {'specdec_env': {'ETCD_AUTH_USERNAME': 'x'}}, base=DYN),
    'dynenv-dyn-disable-frontend-admin-api': Case(
        H +
        "specdec_env.DYN_DISABLE_FRONTEND_ADMIN_API='x': "
        'DYN_DISABLE_FRONTEND_ADMIN_API is reserved (managed by '
        'specdec, or it changes where the engine loads code, weights '
        'or the token from)',
        {'specdec_env': {'DYN_DISABLE_FRONTEND_ADMIN_API': 'x'}}, base=DYN),
    'dynenv-dyn-event-plane-host': Case(
        H +
        "specdec_env.DYN_EVENT_PLANE_HOST='x': DYN_EVENT_PLANE_HOST is "
        'reserved (managed by specdec, or it changes where the engine '
        'loads code, weights or the token from)',
        {'specdec_env': {'DYN_EVENT_PLANE_HOST': 'x'}}, base=DYN),
    'env-proxy-userpass': Case(
        H +
        "specdec_env.HTTPS_PROXY='http://<redacted>@proxy:3128': a URL "
        'with credentials (user:password@); secrets do not belong in '
        'host data or a unit file',
        {'specdec_env': {'HTTPS_PROXY': 'http://user:pass@proxy:3128'}}),
    'env-proxy-user': Case(
        H +
        "specdec_env.HTTPS_PROXY='https://<redacted>@proxy': a URL "
        'with credentials (user:password@); secrets do not belong in '
        'host data or a unit file',
        {'specdec_env': {'HTTPS_PROXY': 'https://tok@proxy'}}),
    'env-proxy-socks': Case(
        H +
        "specdec_env.HTTPS_PROXY='socks5://<redacted>@10.0.0.1:1080': "
        'a URL with credentials (user:password@); secrets do not '
        'belong in host data or a unit file',
        {'specdec_env': {'HTTPS_PROXY': 'socks5://u:p@10.0.0.1:1080'}}),
    'arg-url-creds': Case(
        H +
        "specdec_extra_args[0]='--download-dir=http://<redacted>@x/y': "
        'a URL with credentials (user:password@); secrets do not '
        'belong in host data or a unit file',
        {'specdec_extra_args': ['--download-dir=http://u:p@x/y']}),
    'image-url-creds': Case(
        H +
        "specdec_image='http://<redacted>@registry/x:1': a URL with "
        'credentials (user:password@); secrets do not belong in host '
        'data or a unit file',
        {'specdec_image': 'http://u:p@registry/x:1'}),
    'tokenizer-url-creds': Case(
        H +
        "specdec_model_tokenizer='https://<redacted>@hub/x': a URL "
        'with credentials (user:password@); secrets do not belong in '
        'host data or a unit file',
        {'specdec_model_tokenizer': 'https://u:p@hub/x'}),
}
