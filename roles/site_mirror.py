"""A site's mirror on the host with ``specdec_site_mirror: true`` (`specdec.plan.sites`): nginx
caching
the Hugging Face Hub, and one docker-registry pull-through cache per upstream registry, their
files rendered by `specdec.render.mirror`.

It runs before the images and the weights (deploys/specdec.py): pyinfra runs each operation on
every host before the next, so the site's hosts pull and download through a mirror that is up;
``specdec rollout`` puts the mirrors in its first batch. The token never comes here: the
mirror only passes on what each client sends. Everything it serves is HTTPS with the site's
certificate (`specdec.render.mirror`); every host of the site gets the site's CA
(``/etc/specdec/ca/site.crt``, which its downloads through the mirror trust, and
``/etc/docker/certs.d/<mirror:port>/ca.crt``, which Docker trusts for the registry caches).
"""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.facts.files import FileContents
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from specdec.engines.base import HostPackage
from specdec.errors import SpecdecError
from specdec.host import layout
from specdec.plan.sites import SiteMirror, mirror_of
from specdec.render.mirror import CACHE_DIR, MIRROR_CERT, MIRROR_KEY, NGINX_CONF, render_mirror
from specdec.roles.common import DeployError, HostPlan
from specdec.roles.host_packages import package_present
from specdec.roles.secrets import public_file, secret_file

__all__ = ["nginx_checked", "site_mirror", "site_trust"]

NGINX_USER = "www-data"  # Debian's and Ubuntu's nginx worker user
PACKAGES = (HostPackage("nginx", "nginx"),
            # its own unit serves an empty registry on :5000; ours are per upstream
            HostPackage("docker-registry", "docker-registry", "docker-registry.service"))


def _resolver(m: SiteMirror) -> SiteMirror:
    """The host's first nameserver, when the mirror looks its upstreams up by name and no
    ``specdec_mirror_resolver`` is set."""
    if m.resolver is not None:
        return m
    lines = host.get_fact(FileContents, path="/etc/resolv.conf") or []
    found = next((ln.split()[1] for ln in lines if ln.split()[:1] == ["nameserver"]
                  and len(ln.split()) > 1), None)
    return SiteMirror(**{**m.__dict__, "resolver": found})


@operation()
def nginx_checked(conf: str):
    """``nginx -t`` with the new configuration, then reload (a configuration that fails the test
    fails the host and never reaches the running nginx).

    + conf: the configuration file that changed (named in the output)
    """
    yield "nginx -t -q && systemctl reload-or-restart nginx.service"


def site_trust(hp: HostPlan) -> None:
    """Every host of a site with a mirror: the site's CA, for its downloads and for Docker's
    pulls through the registry caches (certs.d, read at each pull: no daemon restart); a host
    with ``specdec_hub_ca_file``: that CA (its Hub endpoint's, or its mirror's upstream's)."""
    hub_ca = hp.secrets.hub_ca if hp.secrets is not None else None
    if hub_ca is not None:
        public_file(layout.HUB_CA_FILE, hub_ca)
    ca = hp.secrets.site_ca if hp.secrets is not None else None
    if ca is None:
        return
    public_file(layout.SITE_CA_FILE, ca)
    if hp.plan.runtime != "docker":
        return
    for _, where in host.loop(list(hp.settings.registry_mirror)):
        public_file(f"{layout.DOCKER_CERTS_DIR}/{where}/ca.crt", ca)


def _mirror_tls(hp: HostPlan) -> list:
    """The mirror's certificate and key (root 0600; nginx's master and the registry units
    read them as root)."""
    tls = hp.secrets.mirror_tls if hp.secrets is not None else None
    if tls is None:
        raise DeployError(f"{hp.settings.host}: the site mirror has no certificate")
    files.directory(name=f"Ensure {layout.MIRROR_TLS_DIR} (root only)",
                    path=layout.MIRROR_TLS_DIR, user="root", group="root", mode="0700")
    return [secret_file(name=f"Upload the site mirror's {p.rsplit('/', 1)[1]} to {p}", path=p,
                        secret=v) for p, v in zip((MIRROR_CERT, MIRROR_KEY), tls, strict=True)]


@deploy("Site mirror")
def site_mirror(hp: HostPlan) -> None:
    """Every host of a site with a mirror: the site's CA (`site_trust`); its mirror host: the
    mirror."""
    s = hp.settings
    site_trust(hp)
    if not s.site_mirror:
        return
    try:
        rendered = render_mirror(_resolver(mirror_of(s)))
    except (ValueError, SpecdecError) as exc:
        raise DeployError(f"{s.host}: {exc}") from None
    for need in PACKAGES:
        package_present(name=f"Ensure {need.package} is installed", need=need)
    for sub in ("hub", "lfs"):
        files.directory(name=f"Ensure {CACHE_DIR}/{sub}", path=f"{CACHE_DIR}/{sub}",
                        user=NGINX_USER, group=NGINX_USER, mode="0750")
    for c in rendered.registries:
        files.directory(name=f"Ensure {c.storage}", path=c.storage, user="docker-registry",
                        group="docker-registry", mode="0750")
    certs = _mirror_tls(hp)
    put = {path: files.put(name=f"Render {path}", src=StringIO(text), dest=path, user="root",
                           group="root", mode="0644")
           for path, text in rendered.files}
    nginx_checked(name=f"Check and reload nginx ({NGINX_CONF} or its certificate changed)",
                  conf=NGINX_CONF, _if=any_changed(put[NGINX_CONF], *certs))
    systemd.service(name="nginx running and enabled", service="nginx.service", running=True,
                    enabled=True)
    if not rendered.registries:
        return
    systemd.daemon_reload(name="systemd daemon-reload (registry cache units changed)",
                          _if=any_changed(*(put[c.unit_path] for c in rendered.registries)))
    for c in rendered.registries:
        systemd.service(name=f"Restart {c.unit} (its configuration or certificate changed)",
                        service=c.unit, running=True, restarted=True, enabled=True,
                        _if=any_changed(put[c.config], put[c.unit_path], *certs))
        systemd.service(name=f"{c.unit} running and enabled", service=c.unit, running=True,
                        enabled=True)
