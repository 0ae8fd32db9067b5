"""A site's mirror on the host with ``specdec_site_mirror: true`` (`specdec.plan.sites`): nginx
caching
the Hugging Face Hub, and one docker-registry pull-through cache per upstream registry, their
files rendered by `specdec.render.mirror`.

It runs before the images and the weights (deploys/specdec.py): pyinfra runs each operation on
every host before the next, so the site's hosts pull and download through a mirror that is up;
``specdec rollout`` puts the mirrors in its first batch. The token never comes here: the
mirror only passes on what each client sends.
"""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.facts.files import FileContents
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from specdec.engines.base import HostPackage
from specdec.plan.sites import SiteMirror, mirror_of
from specdec.render.mirror import CACHE_DIR, NGINX_CONF, render_mirror
from specdec.roles.common import DeployError, HostPlan
from specdec.roles.host_packages import package_present

__all__ = ["nginx_checked", "site_mirror"]

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


@deploy("Site mirror")
def site_mirror(hp: HostPlan) -> None:
    """The site's mirror, on its mirror host only (every other host: nothing)."""
    s = hp.settings
    if not s.site_mirror:
        return
    try:
        rendered = render_mirror(_resolver(mirror_of(s)))
    except ValueError as exc:
        raise DeployError(f"{s.host}: {exc}") from None
    for need in PACKAGES:
        package_present(name=f"Ensure {need.package} is installed", need=need)
    for sub in ("hub", "lfs"):
        files.directory(name=f"Ensure {CACHE_DIR}/{sub}", path=f"{CACHE_DIR}/{sub}",
                        user=NGINX_USER, group=NGINX_USER, mode="0750")
    for c in rendered.registries:
        files.directory(name=f"Ensure {c.storage}", path=c.storage, user="docker-registry",
                        group="docker-registry", mode="0750")
    put = {path: files.put(name=f"Render {path}", src=StringIO(text), dest=path, user="root",
                           group="root", mode="0644")
           for path, text in rendered.files}
    nginx_checked(name=f"Check and reload nginx ({NGINX_CONF} changed)", conf=NGINX_CONF,
                  _if=put[NGINX_CONF].did_change)
    systemd.service(name="nginx running and enabled", service="nginx.service", running=True,
                    enabled=True)
    if not rendered.registries:
        return
    systemd.daemon_reload(name="systemd daemon-reload (registry cache units changed)",
                          _if=any_changed(*(put[c.unit_path] for c in rendered.registries)))
    for c in rendered.registries:
        systemd.service(name=f"Restart {c.unit} (its configuration changed)", service=c.unit,
                        running=True, restarted=True, enabled=True,
                        _if=any_changed(put[c.config], put[c.unit_path]))
        systemd.service(name=f"{c.unit} running and enabled", service=c.unit, running=True,
                        enabled=True)
