"""The plan's container image, and its resolved digest in /etc/specdec/image.digest."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.api.operation import OperationMeta
from pyinfra.facts.files import FileContents

from specdec.host import layout
from specdec.roles.common import HostPlan
from specdec.roles.facts import ImageDigest
from specdec.roles.lock import leased

__all__ = ["image_digest_file", "image_present", "images"]


@operation()
def image_present(image: str):
    """Pull ``image`` only when it is absent (a present pinned tag or digest is not re-pulled).

    + image: ``repo:tag`` or ``repo[:tag]@sha256:…`` (pinned by the plan, never ``:latest``)
    """
    if host.get_fact(ImageDigest, image=image):
        host.noop(f"image {image} is present")
        return
    # a pull may take long: the deploy lock's lease is renewed while it runs
    yield leased(f"docker pull {shlex.quote(image)}")


@operation()
def image_digest_file(image: str):
    """Record the image's resolved digest in /etc/specdec/image.digest when it differs.

    + image: the image reference the engine runs
    """
    path = layout.IMAGE_DIGEST_FILE
    digest = host.get_fact(ImageDigest, image=image)
    lines = host.get_fact(FileContents, path=path) or []
    current = lines[0].strip() if lines else None
    if digest and digest == current:
        host.noop(f"{path} records {digest}")
        return
    if digest:
        yield f"printf '%s\\n' {shlex.quote(digest)} > {path}"
        return
    # Not pulled yet at prepare time: resolve on the host after the pull.
    fmt = shlex.quote("{{if .RepoDigests}}{{index .RepoDigests 0}}{{else}}{{.Id}}{{end}}")
    yield (
        f"d=$(docker image inspect --format {fmt} {shlex.quote(image)}) && "
        f"{{ [ \"$(cat {path} 2>/dev/null)\" = \"$d\" ] || printf '%s\\n' \"$d\" > {path}; }}"
    )


@deploy("Images")
def images(hp: HostPlan) -> OperationMeta | None:
    """Pull the plan's image (docker runtime); returns the digest-file op, whose change is what
    restarts the engine."""
    image = hp.plan.image
    if hp.plan.runtime != "docker" or not image:
        return None
    image_present(name=f"Pull {image}", image=image)
    return image_digest_file(name=f"Record digest of {image} in {layout.IMAGE_DIGEST_FILE}",
                             image=image)
