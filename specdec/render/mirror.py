"""A site mirror's configuration files, rendered (pure): nginx as a caching proxy of the Hugging
Face Hub, and Debian's docker-registry as a pull-through cache per upstream registry.

**Hub (nginx, Debian's 1.22 / Ubuntu's 1.18; the design tested in fleet.md §2).** Two ports,
both HTTPS with the site's certificate (`MIRROR_CERT`, issued by the site's CA on the control
node, `specdec.config.pki`; the site's hosts trust that CA for their downloads only, and nothing
on the site's LAN sees a token or can change a byte on the way):

* ``HUB_PORT`` is the clients' ``HF_ENDPOINT``. ``/api/`` goes to the Hub as is, token and all,
  uncached. ``/<org>/<name>/resolve/<40-hex commit>/<file>`` (what ``hf download`` fetches by
  commit, huggingface_hub ``file_download.py``) is cached by path: a small file's bytes once per
  site, but every request first asks the Hub for that very file (``HEAD``, with the caller's
  ``Authorization``; ``auth_request``, a 3xx counting as yes): a gated repo stays gated for
  callers without access, cached or not. (Not the repo's ``/api`` metadata: the Hub shows a
  gated repo's metadata and file list to anyone, huggingface.co/docs/hub/models-gated, "You can
  list files but not access them".) The Hub's 302 to its CDN comes back rewritten to the
  second port (https), on the name the client used to reach the mirror. Xet headers are hidden (the
  client then downloads over HTTP; with ``HF_HUB_DISABLE_XET=1`` it does not ask anyway).
* ``LFS_PORT`` serves the CDN's content-addressed bytes, cached by CDN host and path (without
  the signed query and without any token, which a client never sends to another host:
  0.34 ``file_download.py`` drops ``authorization`` when the host differs), in 8 MiB slices
  with concurrent misses collapsed (``slice``, ``proxy_cache_lock``): a site's devices cause
  one upstream fetch per slice. Only the CDN hosts named are fetched from: no open proxy.
  Anyone who reaches this port and knows a file's sha256 gets it: keep it site-internal.

Nothing from a request's headers is logged (the log format names method, path without query,
status and bytes) and cache keys hold no header: the token never reaches the mirror's disk.
Every value written into the configuration is quoted (`specdec.render.nginx.quote`).

**Registries (docker-registry 2.8).** One instance per upstream (a proxy has one
``remoteurl``: Debian's ``configuration.md``, section ``proxy``), pulls only (pushes are
refused). A 2.8 proxy that cannot reach its upstream when it starts panics
(``registry/handlers/app.go``, fleet.md §3): the unit restarts it every 10 s without limit, so
it comes up once the WAN does; while the WAN is down a *restarted* mirror serves nothing,
though a running one keeps serving what it cached. Each serves HTTPS with the site's
certificate (2.8 ``configuration.md``, ``http.tls.certificate`` / ``key``), loaded as systemd
credentials (the key is root's; the registry user reads its copy); Docker on the site's hosts
trusts the site's CA for exactly these ``host:port`` (``/etc/docker/certs.d/<host:port>/ca.crt``,
Docker's "Verify repository client with certificates").
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from specdec.host import layout
from specdec.plan.sites import HUB_PORT, LFS_PORT, SiteMirror, registry_name
from specdec.render.nginx import quote

__all__ = ["CACHE_DIR", "CA_FILE", "LOG_DIR", "MIRROR_CERT", "MIRROR_KEY", "NGINX_CONF",
           "REGISTRY_DIR", "MirrorFiles", "RegistryCache",
           "nginx_conf", "registry_name", "registry_unit", "registry_yaml", "render_mirror"]

NGINX_CONF = "/etc/nginx/conf.d/specdec-site-mirror.conf"
CACHE_DIR = "/var/cache/specdec-mirror"  # hub/ and lfs/, owned by the nginx worker user
LOG_DIR = "/var/log/nginx"
REGISTRY_DIR = "/var/lib/specdec-mirror/registry"  # <name>/ per upstream
REGISTRY_CONF_DIR = "/etc/specdec/mirror"
MIRROR_CERT = f"{layout.MIRROR_TLS_DIR}/mirror.crt"  # root 0600; nginx's master reads them
MIRROR_KEY = f"{layout.MIRROR_TLS_DIR}/mirror.key"
_TLS_CREDS = (("mirror.crt", MIRROR_CERT), ("mirror.key", MIRROR_KEY))
CA_FILE = "/etc/ssl/certs/ca-certificates.crt"  # Debian's and Ubuntu's ca-certificates bundle
SLICE = "8m"
_IPV4 = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}(?::[0-9]+)?")


def _host_of(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


def _needs_resolver(url: str) -> bool:
    host = _host_of(url)
    return not (_IPV4.fullmatch(host) or host.startswith("[") or host.split(":")[0] ==
                "localhost")


def nginx_conf(m: SiteMirror, *, cache_dir: str = CACHE_DIR, log_dir: str = LOG_DIR,
               hub_port: int = HUB_PORT, lfs_port: int = LFS_PORT,
               small_max: str = "2g", lfs_max: str = "400g",
               cert: tuple[str, str] = (MIRROR_CERT, MIRROR_KEY)) -> str:
    """The nginx ``http{}``-level configuration of the site's Hub cache."""
    up = m.hub_upstream
    scheme = up.split("://", 1)[0]
    dynamic = any(_needs_resolver(u) for u in (up, *(f"{scheme}://{h}" for h in m.cdn_hosts)))
    if dynamic and m.resolver is None:
        raise ValueError(f"site {m.site}: the mirror on {m.host} looks up {_host_of(up)} by name: "
                         "it needs a resolver (specdec_mirror_resolver, or a nameserver in its "
                         "/etc/resolv.conf)")
    tls = ("    proxy_ssl_server_name on;\n    proxy_ssl_verify on;\n"
           "    proxy_ssl_verify_depth 4;\n"
           f"    proxy_ssl_trusted_certificate {quote(m.upstream_ca or CA_FILE)};\n"
           ) if scheme == "https" else ""
    tls += (f"    ssl_certificate {quote(cert[0])};\n    ssl_certificate_key {quote(cert[1])};\n"
            "    ssl_protocols TLSv1.2 TLSv1.3;\n")
    resolver = f"    resolver {quote(m.resolver)} valid=300s ipv6=off;\n" if m.resolver else ""
    return (_http_level(m, cache_dir, small_max, lfs_max)
            + _hub_server(m, log_dir, hub_port, lfs_port, resolver, tls)
            + _lfs_server(scheme, log_dir, lfs_port, resolver, tls))


def _http_level(m: SiteMirror, cache_dir: str, small_max: str, lfs_max: str) -> str:
    """The two caches, the maps the servers read and the log format."""
    cdn_map = "".join(f'    {quote(h)} 1;\n' for h in m.cdn_hosts)
    return f"""\
# specdec site mirror of site {quote(m.site)} on {quote(m.host)}: the Hugging Face Hub, cached.
# Rendered by specdec (specdec/render/mirror.py); changes here are overwritten.
proxy_cache_path {quote(cache_dir + "/hub")} levels=1:2 keys_zone=specdec_hub:10m
                 max_size={small_max} inactive=30d use_temp_path=off;
proxy_cache_path {quote(cache_dir + "/lfs")} levels=1:2 keys_zone=specdec_lfs:50m
                 max_size={lfs_max} inactive=90d use_temp_path=off;
map $request_method $specdec_is_head {{
    default 0;
    HEAD 1;
}}
# the path as the client sent it (still encoded), without the query: the gate asks for it
map $request_uri $specdec_raw_path {{
    "~^(?<p>[^?]*)" $p;
}}
map $specdec_cdn_host $specdec_cdn_ok {{
    default 0;
{cdn_map}}}
# No header, no query string: nothing a caller sends as a credential reaches the log.
log_format specdec_mirror '$remote_addr [$time_local] "$request_method $uri" $status '
                          '$body_bytes_sent $upstream_cache_status $request_time';

"""


def _hub_responses(up: str, hub_port: int, lfs_port: int) -> str:
    """The Hub's own absolute redirects stay on this port, any other host's go to the LFS port;
    Xet headers hidden."""
    hide = "".join(f"        proxy_hide_header {h};\n" for h in
                   ("X-Xet-Hash", "X-Xet-Refresh-Route", "X-Xet-Cas-Url",
                    "X-Xet-Access-Token", "X-Xet-Token-Expiration", "Link"))
    return (f"        proxy_redirect {quote(up + '/')} \"https://$host:{hub_port}/\";\n"
            f"        proxy_redirect \"~^https?://([^/]+)/(.*)$\" "
            f"\"https://$host:{lfs_port}/$1/$2\";\n{hide}")


def _hub_server(m: SiteMirror, log_dir: str, hub_port: int, lfs_port: int, resolver: str,
                tls: str) -> str:
    """The clients' ``HF_ENDPOINT``: the Hub's answers, a file at a commit cached."""
    resolve = _hub_responses(m.hub_upstream, hub_port, lfs_port)
    return f"""\
server {{
    listen {hub_port} ssl;
    access_log {quote(log_dir + "/specdec-mirror.access.log")} specdec_mirror;
    error_log {quote(log_dir + "/specdec-mirror.error.log")} warn;
{resolver}    # the upstream, path and all: with a variable, proxy_pass sends the URI it is given
    # (ngx_http_proxy_module), so each request's own follows it
    set $specdec_hub {quote(m.hub_upstream)};
    proxy_http_version 1.1;
    proxy_set_header Connection "";
{tls}
    # Metadata, revisions, file lists, tokens: the Hub's, every time.
    location /api/ {{
        proxy_pass $specdec_hub$request_uri;
    }}
{_commit_file_location(resolve)}{_GATE_LOCATIONS}\
    # A branch or tag name moves: never cached.
    location / {{
        proxy_pass $specdec_hub$request_uri;
{resolve}    }}
}}

"""


def _commit_file_location(resolve: str) -> str:
    """A file at a commit: cached by path, each request authorised by the Hub first."""
    return f"""\
    # A file at a commit: cached by path; each request authorised by the Hub first.
    location ~ "^/[^/]+/[^/]+/resolve/[0-9a-f]{{40}}/" {{
        auth_request /_specdec_gate;
        auth_request_set $specdec_gate_error $upstream_http_x_error_code;
        add_header X-Error-Code $specdec_gate_error always;
        proxy_pass $specdec_hub$request_uri;
        proxy_cache specdec_hub;
        proxy_cache_key $uri;
        proxy_cache_valid 200 30d;
        proxy_cache_lock on;
        proxy_cache_lock_timeout 10m;
        proxy_cache_lock_age 10m;
        # HEAD carries the metadata (and the 302 to the CDN): always the Hub's, and a HEAD
        # (not turned into a GET, which would fetch the body for nothing)
        proxy_no_cache $specdec_is_head;
        proxy_cache_bypass $specdec_is_head;
        proxy_cache_convert_head off;
{resolve}    }}
"""


_GATE_LOCATIONS = """\
    # May the caller have this file? The Hub's answer to HEAD of it: 2xx or a redirect (to the
    # CDN) is yes, 401/403 is no (and is what the caller gets).
    location = /_specdec_gate {
        internal;
        proxy_method HEAD;
        proxy_pass_request_body off;
        proxy_set_header Content-Length "";
        proxy_set_header Range "";
        proxy_intercept_errors on;
        error_page 301 302 303 307 308 = @specdec_allowed;
        proxy_pass $specdec_hub$specdec_raw_path;
    }
    location @specdec_allowed {
        return 204;
    }
"""


def _lfs_server(scheme: str, log_dir: str, lfs_port: int, resolver: str, tls: str) -> str:
    """The CDN's content-addressed bytes: only the CDN hosts named, no credential sent on,
    cached in slices."""
    return f"""\
server {{
    listen {lfs_port} ssl;
    access_log {quote(log_dir + "/specdec-mirror-lfs.access.log")} specdec_mirror;
    error_log {quote(log_dir + "/specdec-mirror.error.log")} warn;
{resolver}    proxy_http_version 1.1;
    proxy_set_header Connection "";
{tls}
    location ~ "^/(?<specdec_cdn_host>[^/]+)/(?<specdec_cdn_path>.+)$" {{
        if ($specdec_cdn_ok = 0) {{
            return 403;
        }}
        proxy_set_header Authorization "";
        proxy_set_header Cookie "";
        slice {SLICE};
        proxy_set_header Range $slice_range;
        proxy_cache specdec_lfs;
        proxy_cache_key $specdec_cdn_host/$specdec_cdn_path$slice_range;
        proxy_cache_valid 200 206 90d;
        proxy_cache_lock on;
        proxy_cache_lock_timeout 10m;
        proxy_cache_lock_age 10m;
        proxy_pass {scheme}://$specdec_cdn_host/$specdec_cdn_path$is_args$args;
    }}
    location / {{
        return 404;
    }}
}}
"""


def registry_yaml(registry: str, upstream: str, port: int, root: str = REGISTRY_DIR,
                  creds: str | None = None) -> str:
    """docker-registry 2.8's configuration of a pull-through cache of ``upstream``, serving
    HTTPS with the site's certificate from ``creds`` (the unit's credentials directory). Each
    value a JSON string (a YAML flow scalar: no ':' or '#' in it can start a mapping or a
    comment)."""
    name = registry_name(registry)
    tls = "" if creds is None else (
        f"  tls:\n    certificate: {json.dumps(creds + '/mirror.crt')}\n"
        f"    key: {json.dumps(creds + '/mirror.key')}\n")
    return f"""\
# specdec site mirror: pull-through cache of {json.dumps(registry)}. Rendered by specdec.
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {json.dumps(f"{root}/{name}")}
  delete:
    enabled: true
  cache:
    blobdescriptor: inmemory
http:
  addr: {json.dumps(f":{port}")}
{tls}  headers:
    X-Content-Type-Options: [nosniff]
proxy:
  remoteurl: {json.dumps(upstream)}
"""


def registry_unit(registry: str, config: str) -> str:
    """The systemd unit of one pull-through cache (Debian's docker-registry user and binary),
    the site's certificate and key as its credentials."""
    creds = "".join(f"LoadCredential={n}:{p}\n" for n, p in _TLS_CREDS)
    return f"""\
# specdec site mirror: pull-through cache of {registry}. Rendered by specdec.
[Unit]
Description=specdec site mirror: pull-through cache of {registry}
Wants=network-online.target
After=network-online.target
# docker-registry 2.8 exits when its upstream is unreachable at start: keep trying
StartLimitIntervalSec=0

[Service]
User=docker-registry
Group=docker-registry
{creds}ExecStart=/usr/bin/docker-registry serve {config}
Restart=always
RestartSec=10

[Install]
WantedBy=multi-user.target
"""


@dataclass(frozen=True)
class RegistryCache:
    """One upstream's pull-through cache: its unit, configuration and storage."""

    registry: str
    unit: str  # e.g. specdec-registry-nvcr-io.service
    config: str
    unit_path: str
    storage: str


@dataclass(frozen=True)
class MirrorFiles:
    """Everything a site mirror host gets: path -> content, and the registry caches."""

    files: tuple[tuple[str, str], ...]
    registries: tuple[RegistryCache, ...]


def render_mirror(m: SiteMirror) -> MirrorFiles:
    files = [(NGINX_CONF, nginx_conf(m))]
    caches = []
    for registry, upstream, port in m.registry_ports():
        name = registry_name(registry)
        unit = f"specdec-registry-{name}.service"
        c = RegistryCache(registry, unit, f"{REGISTRY_CONF_DIR}/registry-{name}.yml",
                          f"/etc/systemd/system/{unit}", f"{REGISTRY_DIR}/{name}")
        files.append((c.config, registry_yaml(registry, upstream, port,
                                              creds=f"/run/credentials/{unit}")))
        files.append((c.unit_path, registry_unit(registry, c.config)))
        caches.append(c)
    return MirrorFiles(tuple(files), tuple(caches))
