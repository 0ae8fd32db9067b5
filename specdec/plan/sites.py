"""Sites: weights and images fetched once per site, through the site's mirror (pure).

A host names its site with ``specdec_site``; one host per site may run the site's mirror
(``specdec_site_mirror: true``, deployed by ``roles/site_mirror.py``): Debian's nginx as a
caching proxy of the Hugging Face Hub (`specdec.render.mirror`) and Debian's docker-registry
as a pull-through cache per upstream registry. `resolve` gives every host of a site with a
mirror:

* its Hub endpoint (``HF_ENDPOINT`` for the image's own Hub CLI): the mirror over HTTPS, with
  the site's CA the only one the download trusts, unless the host pins
  ``specdec_hub_endpoint``; downloads from any endpoint but the Hub run with
  ``HF_HUB_DISABLE_XET=1`` (`download_env`). The token goes (only for a repo that needs it)
  inside TLS to the mirror, which passes it to the Hub for every gated file (it is never
  stored there);
* its images by the mirror's name at the pinned digest (`mirror_image`): Docker's
  ``registry-mirrors`` applies only to Docker Hub (moby ``daemon/hosts.go``,
  ``mergeLegacyConfig``), so a pull through the mirror names the mirror, and only a digest
  makes that the same image as upstream (a mirror caches a tag for 7 days, docker/distribution
  2.8 ``registry/proxy/proxyregistry.go`` ``repositoryTTL``).

The mirror's sockets are planned (`mirror_sockets`): its firewall admits the site's hosts, by
address, and no one else.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from specdec.catalog.images import parse_image_ref
from specdec.config.settings import HostSettings
from specdec.engines.base import member_reach
from specdec.errors import ConfigError
from specdec.host.layout import HUB_CA_FILE, SITE_CA_FILE
from specdec.plan.types import Socket

__all__ = ["CA_VARIABLES", "DEFAULT_CDN_HOSTS", "DEFAULT_HUB", "DEFAULT_REGISTRIES", "HUB_PORT",
           "LFS_PORT", "MIRROR_UNIT", "REGISTRY_PORT0", "SiteMirror", "download_env",
           "mirror_image", "mirror_of", "mirror_sockets", "registry_name", "registry_of", "resolve",
           "site_mirror_hosts", "site_mirrors"]

HUB_PORT = 8180  # HF_ENDPOINT=https://<mirror>:8180 (/api passed through, small files cached)
LFS_PORT = 8181  # the CDN's content-addressed bytes, cached by path (no token, no signature)
REGISTRY_PORT0 = 5001  # the first upstream registry's pull-through cache; then 5002, ...
DEFAULT_HUB = "https://huggingface.co"
# Where the Hub redirects LFS and Xet-bridge downloads (huggingface_hub's own tests and the
# Hub's 302 Location headers, fleet.md §2); the mirror fetches from no other host.
DEFAULT_CDN_HOSTS = ("cdn-lfs.hf.co", "cdn-lfs-us-1.hf.co", "cdn-lfs-eu-1.hf.co",
                     "cas-bridge.xethub.hf.co")
DEFAULT_REGISTRIES = (("docker.io", "https://registry-1.docker.io"),
                      ("ghcr.io", "https://ghcr.io"), ("nvcr.io", "https://nvcr.io"))
_DOCKER_HUB = ("docker.io", "index.docker.io", "registry-1.docker.io")
MIRROR_UNIT = "nginx"  # Debian's nginx.service serves the Hub cache
# The trust store of a download through the mirror: the site's CA and nothing else.
# requests 2.34 (huggingface_hub 0.33-0.36): ``REQUESTS_CA_BUNDLE`` (sessions.py
# ``merge_environment_settings``); httpx2 2.16 (huggingface_hub 2.x): ``SSL_CERT_FILE``
# (httpcore2 ``_ssl.py`` ``default_ssl_context``), as httpx 0.28 (1.x) reads it too.
CA_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")


def registry_name(registry: str) -> str:
    """A file and unit name for an upstream registry: ``nvcr.io`` -> ``nvcr-io`` (two
    registries of one mirror must not share one: `specdec.plan.hostdata` refuses that)."""
    return re.sub(r"[^a-z0-9]+", "-", registry.lower()).strip("-")


@dataclass(frozen=True)
class SiteMirror:
    """A site's mirror host and what it fronts."""

    site: str
    host: str
    address: str  # where the site's hosts reach it
    hub_upstream: str = DEFAULT_HUB
    cdn_hosts: tuple[str, ...] = DEFAULT_CDN_HOSTS
    registries: tuple[tuple[str, str], ...] = DEFAULT_REGISTRIES  # registry -> upstream URL
    resolver: str | None = None
    upstream_ca: str | None = None  # on the mirror host: the CA its Hub and CDN chain to

    @property
    def hub_url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"https://{host}:{HUB_PORT}"

    def names(self) -> tuple[str, ...]:
        """What the mirror's certificate names: where the site reaches it, and this host."""
        return tuple(dict.fromkeys((self.address, "127.0.0.1", "localhost")))

    def registry_ports(self) -> tuple[tuple[str, str, int], ...]:
        """(registry, upstream URL, port) per upstream, ports in registry-name order."""
        return tuple((r, u, REGISTRY_PORT0 + i) for i, (r, u) in enumerate(self.registries))

    def registry_mirror(self) -> tuple[tuple[str, str], ...]:
        """registry -> "address:port" of its pull-through cache."""
        return tuple((r, f"{self.address}:{p}") for r, _, p in self.registry_ports())


def mirror_of(s: HostSettings) -> SiteMirror:
    assert s.site is not None
    return SiteMirror(
        site=s.site, host=s.host,
        address=s.site_mirror_address or s.ssh_hostname or s.host,
        hub_upstream=s.hub_upstream or DEFAULT_HUB,
        cdn_hosts=s.hub_cdn_hosts or DEFAULT_CDN_HOSTS,
        registries=s.registry_upstreams or DEFAULT_REGISTRIES,
        resolver=s.mirror_resolver,
        upstream_ca=HUB_CA_FILE if s.hub_ca_file else None,
    )


def site_mirrors(settings: Iterable[HostSettings]) -> dict[str, SiteMirror]:
    """Site -> its mirror; two mirrors for one site is an error naming both."""
    out: dict[str, SiteMirror] = {}
    for s in settings:
        if not s.site_mirror:
            continue
        assert s.site is not None  # hostdata refuses a mirror without a site
        m = mirror_of(s)
        taken = {HUB_PORT, LFS_PORT, *(p for _, _, p in m.registry_ports())}
        if s.port in taken:
            raise ConfigError(f"specdec_port={s.port}: the site mirror on this host listens "
                              f"there (it uses {', '.join(map(str, sorted(taken)))})",
                              host=s.host)
        if s.site in out:
            raise ConfigError(f"specdec_site_mirror=true: site {s.site!r} already has its "
                              f"mirror on {out[s.site].host}; one mirror per site", host=s.host)
        out[s.site] = m
    return out


def resolve(settings: Sequence[HostSettings]) -> list[HostSettings]:
    """Every host's settings with its site's mirror filled in (Hub endpoint unless pinned, and
    the registries it pulls through); hosts of sites without a mirror are unchanged."""
    mirrors = site_mirrors(settings)
    out = []
    for s in settings:
        m = mirrors.get(s.site) if s.site is not None else None
        if m is None:
            out.append(s)
            continue
        endpoint = s.hub_endpoint or m.hub_url
        clients = _site_clients(settings, s.site) if s.site_mirror else ()
        out.append(dataclasses.replace(s, hub_endpoint=endpoint,
                                       hub_mirrored=endpoint == m.hub_url,
                                       registry_mirror=m.registry_mirror(),
                                       site_clients=clients))
    return out


def _site_clients(settings: Sequence[HostSettings], site: str | None) -> tuple[str, ...]:
    """The site's hosts as networks: who the mirror's firewall admits (by address)."""
    members = [(s.host, s.ssh_hostname or s.host) for s in settings if s.site == site]
    return tuple(dict.fromkeys(member_reach(members, "ssh_hostname")))


def mirror_sockets(s: HostSettings) -> list[Socket]:
    """The mirror's sockets (on its mirror host): the Hub cache and the CDN's bytes on nginx,
    a registry cache per upstream, each reached by the site's hosts only."""
    if not s.site_mirror:
        return []
    m = mirror_of(s)
    who = f"site {m.site}'s hosts"
    out = [Socket(MIRROR_UNIT, "site mirror: the Hub (HTTPS)", "0.0.0.0", HUB_PORT,
                  s.site_clients, who),
           Socket(MIRROR_UNIT, "site mirror: the CDN's files (HTTPS)", "0.0.0.0", LFS_PORT,
                  s.site_clients, who)]
    out += [Socket(f"specdec-registry-{registry_name(r)}", f"site mirror: {r} images (HTTPS)",
                   "0.0.0.0", p, s.site_clients, who) for r, _, p in m.registry_ports()]
    return out




def site_mirror_hosts(settings: Iterable[HostSettings]) -> set[str]:
    """The hosts that run their site's mirror (checked: one per site)."""
    return {m.host for m in site_mirrors(settings).values()}


def registry_of(ref: str) -> tuple[str, str] | None:
    """(registry, repository path) of an image reference as Docker resolves it: no registry is
    Docker Hub, where a one-component path is ``library/<name>`` (distribution/reference
    normalize.go)."""
    parsed = parse_image_ref(ref)
    if parsed is None:
        return None
    registry = parsed.domain or "docker.io"
    if registry in _DOCKER_HUB:
        path = parsed.path if "/" in parsed.path else f"library/{parsed.path}"
        return "docker.io", path
    return registry, parsed.path


def mirror_image(s: HostSettings, ref: str, notes: list[str]) -> str:
    """The reference the host pulls and runs: through its site's registry mirror when that
    fronts the image's registry (the digest must be pinned), else ``ref``."""
    mirrors = dict(s.registry_mirror)
    where = registry_of(ref)
    if where is None or where[0] not in mirrors:
        if where is not None and mirrors:
            notes.append(f"image registry {where[0]} is not mirrored at site {s.site}: "
                         "pulled from it directly")
        return ref
    parsed = parse_image_ref(ref)
    assert parsed is not None
    if parsed.digest is None:
        raise ConfigError(
            f"specdec_image={ref!r}: site {s.site} pulls {where[0]} images through its "
            "registry mirror, which needs the image pinned by digest (repo:tag@sha256:…): a "
            "tag can differ between the mirror's cache and the registry", host=s.host)
    registry, path = where
    tag = f":{parsed.tag}" if parsed.tag else ""
    out = f"{mirrors[registry]}/{path}{tag}@{parsed.digest}"
    notes.append(f"image pulled through site {s.site}'s registry mirror: {out}")
    return out


def download_env(s: HostSettings) -> list[tuple[str, str]]:
    """What the Hub CLI's download needs besides the cache variables: the endpoint, and with a
    mirror Xet off. huggingface_hub reads ``HF_ENDPOINT`` for every URL (0.34.6
    ``constants.py:67-68``) and ``HF_HUB_DISABLE_XET`` in 0.33.5 (``utils/_runtime.py:158``),
    0.36.0 (``constants.py:294``) and 2.2.0 (``constants.py:343``). Xet must be off through a
    mirror: from 1.22 the file list comes from the tree API, whose ``xetHash`` the mirror passes
    unchanged, and the client would fetch from the Xet CAS directly, past the mirror (fleet.md
    §2); older clients see no Xet headers through it (the mirror hides them) and are told too.
    ``HF_HUB_DISABLE_UPDATE_CHECK`` stops the CLI's daily PyPI check (2.4.0
    ``cli/_cli_utils.py``); ``HF_HUB_DISABLE_TELEMETRY`` its usage pings."""
    if s.hub_endpoint is None:
        return []
    env = [("HF_ENDPOINT", s.hub_endpoint)]
    if s.hub_endpoint != DEFAULT_HUB:  # a mirror (the site's, or one the host names)
        env.append(("HF_HUB_DISABLE_XET", "1"))
    if s.hub_mirrored:  # every URL of the download is the mirror's (the CDN's rewritten to it)
        env += [(v, SITE_CA_FILE) for v in CA_VARIABLES]
    elif s.hub_ca_file:  # a private endpoint, and its CA (specdec_hub_ca_file)
        env += [(v, HUB_CA_FILE) for v in CA_VARIABLES]
    return env + [("HF_HUB_DISABLE_UPDATE_CHECK", "1"), ("HF_HUB_DISABLE_TELEMETRY", "1")]
