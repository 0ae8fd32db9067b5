"""Put every host back on its last-good release: ``pyinfra -y INVENTORY deploys/recover.py``.

For a host left between releases (a deploy cut off mid-way: SSH lost, control node rebooted)
when you do not want to re-run the full deploy. Takes the deploy lock; on a host whose
``current`` is not ``last-good`` it switches ``current`` back atomically, reloads systemd and
restarts the engine; a host already on its last-good release is left alone ("No changes").
A host without a last-good release is reported and left as it is.
"""

import shlex

from pyinfra import host
from pyinfra.api import operation
from pyinfra.facts.files import File
from pyinfra.operations import systemd

from specdec.host import guard, layout, release
from specdec.roles import deploy_lock, deploy_unlock, escalation
from specdec.roles.facts import SpecdecReleases


@operation()
def restore_last_good():
    """Switch ``current`` to ``last-good`` if they differ.

    (no arguments)
    """
    st = host.get_fact(SpecdecReleases)
    if st.last_good is None:
        host.noop("no last-good release recorded; left as it is")
        return
    if st.current == st.last_good:
        host.noop(f"already on last-good {st.last_good}")
        return
    yield release.activate(st.last_good)
    yield guard.disarm_command()
    dirs = [layout.release_dir(r) for r in (st.current, st.last_good) if r]
    if any(host.get_fact(File, path=f"{d}/{u}.service") for d in dirs
           for u in layout.AUX_SERVICES):  # a Dynamo frontend member: etcd and the frontend too
        old, new = (shlex.quote(layout.release_dir(r or "none")) for r in (st.current,
                                                                           st.last_good))
        yield f"systemctl daemon-reload && {{ {release.aux_restart(old, new)}; }}"


kw = escalation(host.data)
deploy_lock(recheck=False, **kw)  # restore_last_good reads the live state itself
switch = restore_last_good(name="Switch current to last-good", **kw)
systemd.daemon_reload(name="Reload systemd (release switched)", _if=switch.did_change, **kw)
systemd.service(
    name=f"Restart {layout.SERVICE_NAME} on last-good",
    service=f"{layout.SERVICE_NAME}.service",
    running=True,
    restarted=True,
    _if=switch.did_change,
    **kw,
)
deploy_unlock(**kw)
