"""Debian root filesystems built once with debootstrap and cached by a hash of their recipe.

Two recipes: `HOST_RECIPE` (a lab host: systemd, sshd, Docker, python3, etcd for Dynamo
groups) and `IMAGE_RECIPE` (the
base of the engine emulator images: python3 + PyYAML). A cache entry is
``CACHE_DIR/rootfs-<name>-<hash>/`` and only appears (atomic rename) once complete; a changed
recipe gives a new hash and so a rebuild. Downloaded .debs are shared in ``CACHE_DIR/debs``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from specdec_lab.errors import LabError
from specdec_lab.filelock import locked
from specdec_lab.paths import CACHE_DIR
from specdec_lab.system import mounts

__all__ = ["CPU_LAYER", "HOST_RECIPE", "IMAGE_RECIPE", "Layer", "Recipe", "cached_rootfs",
           "ensure_layer", "ensure_rootfs"]

# The Debian archive debootstrap installs from (not the lab site's mirror host: specdec_lab.sites).
MIRROR = os.environ.get("SPECDEC_LAB_DEBIAN_MIRROR", "http://deb.debian.org/debian")


@dataclass(frozen=True)
class Recipe:
    name: str
    suite: str
    variant: str
    include: tuple[str, ...]
    # Shell run in a chroot of the fresh rootfs (no daemons start: policy-rc.d is in place).
    post: tuple[str, ...] = ()
    # Paths (relative) removed after post: docs, caches, per-machine identity.
    remove: tuple[str, ...] = ()

    def digest(self) -> str:
        doc = asdict(self)
        doc["mirror"] = MIRROR
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]

    def path(self) -> Path:
        return CACHE_DIR / f"rootfs-{self.name}-{self.digest()}"


_SLIM = (
    "usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
    "var/cache/apt/archives", "var/lib/apt/lists", "var/cache/debconf/templates.dat-old",
)

HOST_RECIPE = Recipe(
    name="host",
    suite="bookworm",
    variant="minbase",
    include=(
        "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-yaml",
        "iproute2", "docker.io", "ca-certificates", "procps", "curl", "sudo", "less",
        # A Dynamo group's discovery (Debian 12: etcd 3.4.23); its unit is the deploy's
        # specdec-etcd.service on the frontend member, so the package's own stays disabled.
        "etcd-server",
        # What roles/site_mirror.py installs on a site's mirror host (the lab has no network to
        # install from): nginx and docker-registry, their own units off until the role acts.
        "nginx", "docker-registry",
        # The release's firewall (nft) and API proxy (nginx), as the deploy would install
        # them (roles/host_packages.py); nginx.service stays off until a site mirror uses it.
        "nftables",
    ),
    post=(
        # Units a lab host does not need (no hardware, no real network, no console login).
        "systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_reap.service"
        " fstrim.timer systemd-networkd-wait-online.service >/dev/null 2>&1 || true",
        "systemctl enable ssh.service docker.service >/dev/null",
        "systemctl disable etcd.service >/dev/null 2>&1 || true",
        "systemctl disable nginx.service docker-registry.service >/dev/null 2>&1 || true",
        "systemctl disable nftables.service >/dev/null 2>&1 || true",
        "passwd -l root >/dev/null",
    ),
    remove=(*_SLIM, "etc/ssh/ssh_host_*", "etc/machine-id", "var/lib/dbus/machine-id",
            "etc/hostname"),
)

IMAGE_RECIPE = Recipe(
    name="image",
    suite="bookworm",
    variant="minbase",
    include=("python3-minimal", "python3-yaml"),
    remove=(*_SLIM, "var/cache/debconf/*-old", "var/log/*.log", "var/log/apt"),
)


@dataclass(frozen=True)
class Layer:
    """Debian packages added to a built rootfs (``dpkg -i`` in a chroot of a copy: seconds,
    where a recipe of its own would debootstrap again): a host kind's own root, e.g. an
    x86-cpu host's."""

    name: str
    base: Recipe
    packages: tuple[str, ...]

    def digest(self) -> str:
        doc = {"base": self.base.digest(), "packages": list(self.packages)}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]

    def path(self) -> Path:
        return CACHE_DIR / f"rootfs-{self.name}-{self.digest()}"


# An x86-cpu host runs the real vLLM for CPU: what it needs from the OS that a lab host lacks
# (the deploy checks them, specdec.engines.vllm.engine CPU_PACKAGES): vllm/_C*.so link
# libnuma.so.1, tcmalloc is preloaded (util-linux's lscpu is in every minbase).
CPU_LAYER = Layer("cpuhost", HOST_RECIPE, ("libnuma1", "libtcmalloc-minimal4"))


def cached_rootfs(recipe: Recipe) -> Path | None:
    """The recipe's cached rootfs, or None when it has not been built."""
    path = recipe.path()
    return path if (path / ".specdec-recipe.json").is_file() else None


def _run(argv: list[str], what: str, log: Path, cwd: Path | None = None) -> None:
    with open(log, "ab") as out:
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, check=False)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["?"]
        raise LabError(f"{what} failed (exit {proc.returncode}): {tail[0]} (log: {log})")


def ensure_rootfs(recipe: Recipe) -> Path:
    """Build ``recipe`` unless cached; returns its directory. Concurrent callers wait."""
    if shutil.which("debootstrap") is None:
        raise LabError("debootstrap is not installed (apt-get install debootstrap)")
    # One build at a time: parallel debootstraps corrupt each other's files in the .deb cache.
    with locked(CACHE_DIR / ".rootfs.lock"):
        done = cached_rootfs(recipe)
        if done is not None:
            return done
        final = recipe.path()
        work = final.with_name(final.name + ".building")
        log = CACHE_DIR / f"rootfs-{recipe.name}.log"
        log.write_text("")
        if work.exists():
            shutil.rmtree(work)
        debs = CACHE_DIR / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        _run(
            ["debootstrap", f"--variant={recipe.variant}", f"--include={','.join(recipe.include)}",
             f"--cache-dir={debs}", recipe.suite, str(work), MIRROR],
            f"debootstrap of the {recipe.name} rootfs", log,
        )
        if recipe.post:
            rc_d = work / "usr/sbin/policy-rc.d"
            rc_d.write_text("#!/bin/sh\nexit 101\n")
            rc_d.chmod(0o755)
            try:
                for cmd in recipe.post:
                    _run(["chroot", str(work), "/bin/sh", "-c", cmd],
                         f"rootfs {recipe.name} step {cmd!r}", log)
            finally:
                rc_d.unlink()
        for pattern in recipe.remove:
            for p in work.glob(pattern):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                    p.mkdir()
                else:
                    p.unlink()
        (work / ".specdec-recipe.json").write_text(
            json.dumps(asdict(recipe), indent=1, sort_keys=True) + "\n"
        )
        _prune(recipe.name, final)
        work.rename(final)
        return final


def _prune(name: str, keep: Path) -> None:
    """Older builds of the same name are stale now, unless a running lab (another instance,
    older sources) still has one as the lower layer of a host's root."""
    lowers = {low for m in mounts() if m.fstype == "overlay"
              for opt in m.options.split(",") if opt.startswith("lowerdir=")
              for low in opt.removeprefix("lowerdir=").split(":")}
    for old in CACHE_DIR.glob(f"rootfs-{name}-*"):
        if old != keep and old.is_dir() and not old.name.endswith(".building") \
                and str(old) not in lowers:
            shutil.rmtree(old, ignore_errors=True)


def ensure_layer(layer: Layer) -> Path:
    """The base rootfs with ``layer``'s packages (the control node's apt fetches them: the same
    Debian release), built once; concurrent callers wait."""
    base = ensure_rootfs(layer.base)
    with locked(CACHE_DIR / ".rootfs.lock"):
        final = layer.path()
        if (final / ".specdec-recipe.json").is_file():
            return final
        work = final.with_name(final.name + ".building")
        log = CACHE_DIR / f"rootfs-{layer.name}.log"
        log.write_text("")
        if work.exists():
            shutil.rmtree(work)
        _run(["cp", "-a", "--reflink=auto", str(base), str(work)], "copying the host rootfs", log)
        debs = work / "tmp" / "specdec-debs"
        debs.mkdir(parents=True)
        _run(["apt-get", "download", "-q", *layer.packages],
             f"apt-get download {' '.join(layer.packages)} (apt-get update?)", log, cwd=debs)
        _run(["chroot", str(work), "/bin/sh", "-c", "dpkg -i /tmp/specdec-debs/*.deb"],
             f"dpkg -i {' '.join(layer.packages)} in the {layer.name} rootfs", log)
        shutil.rmtree(debs)
        (work / ".specdec-recipe.json").write_text(json.dumps(
            {"layer": layer.name, "base": layer.base.digest(), "packages": list(layer.packages)},
            indent=1, sort_keys=True) + "\n")
        _prune(layer.name, final)
        work.rename(final)
        return final
