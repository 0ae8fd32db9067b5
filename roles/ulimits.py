"""PAM limits for the service user (/etc/security/limits.d/90-specdec.conf, from render).

systemd services ignore PAM limits; the engine unit carries its own LimitMEMLOCK/LimitSTACK.
"""

from __future__ import annotations

from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import files

from specdec.render.files import LIMITS_PATH
from specdec.roles.common import HostPlan

__all__ = ["ulimits"]


@deploy("Ulimits")
def ulimits(hp: HostPlan) -> None:
    """Upload the rendered limits.d file (only when its content, owner or mode differ)."""
    f = hp.rendered.by_path[LIMITS_PATH]
    files.put(
        name=f"Upload {f.path}",
        src=StringIO(f.content),
        dest=f.path,
        user=f.owner,
        group=f.group,
        mode=f.mode,
    )
