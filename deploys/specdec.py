"""The specdec deploy: ``pyinfra inventories/jetsons.py deploys/specdec.py``.

Every host is planned first, in pyinfra's prepare phase (data validated, device identified,
plan fitted, files rendered, HF token read on this machine): a bad plan stops the whole run with
one line naming host, key and value before any host is changed. Then the roles run in the
order below; each compares facts with the plan and sends only what differs, so a second run
sends no changing command. Facts are read once per host per run and once more, in one
command, when the lock is held (roles/factcache.py): on an unchanged host the operations are
answered from that read, so a re-run costs each host the lock's round trips, not one per
operation. The deploy lock is taken first and released last; it returns the
release state `serve` and `verify` plan from, and fails the host if that state moved before the
lock was held. `verify` checks what `serve` activated (see roles/verify.py).
"""

from pyinfra import host

from specdec.roles import (
    deploy_lock,
    deploy_unlock,
    docker_access,
    escalation,
    hf_token,
    host_packages,
    host_secrets,
    images,
    jetson_tuning,
    model_prefetch,
    prepare_host,
    renew_lease,
    serve,
    site_mirror,
    ulimits,
    verify,
)
from specdec.roles.deployfile import name_deploy_file

name_deploy_file(__file__)  # pyinfra's per-operation stack walk: a dict hit for this file


hp, token = prepare_host(host)
kw = escalation(host.data)  # root throughout: sudo unless the inventory says otherwise

# First: two rollouts to one host must not interleave (released last, or by verify on failure).
planned = deploy_lock(**kw)

# The service user and docker group first: later files are owned by the user.
daemon_json = docker_access(hp, **kw)
# The token before anything downloads or starts an engine that reads it.
hf_token(hp, token, **kw)
# The API key, a serving group's certificates, the API's TLS: root-only files the units load.
secret_ops = host_secrets(hp, **kw)
ulimits(hp, **kw)
jetson_tuning(hp, **kw)
# A site's mirror (its mirror host only) before any host of the site pulls or downloads.
site_mirror(hp, **kw)
# Long phases renew the deploy lock's lease first (a pull or a download also while it runs).
renew_lease(**kw)
digest = images(hp, **kw)
# Weights after the image: with the docker runtime `hf download` runs inside it.
renew_lease(**kw)
model_prefetch(hp, **kw)
# Packages the release's units need (a Dynamo group's frontend member: etcd, the
# distribution's etcd.service off).
host_packages(hp, **kw)
# Last: release files, unit link, atomic switch, restart only on change.
served = serve(hp, restart_on=[daemon_json, digest], recorded=planned,
               secrets_changed=secret_ops, **kw)
# Health, limits, benchmark and gate; keep, disable, or roll back and fail the host.
renew_lease(**kw)
verify(hp, served, token, prior=planned, **kw)
deploy_unlock(**kw)
