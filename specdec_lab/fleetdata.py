"""Building blocks for lab inventories (``inventories/lab.py``): host data from a short table
plus the lab's environment knobs.

``SPECDEC_LAB_HOSTS=N``
    how many hosts of the table to use (default: the first four; at most the table's length).
``SPECDEC_LAB_TIME_SCALE=X``
    the emulator's wall seconds per emulated second (default 0.1: ten times faster).
``SPECDEC_LAB_FAULTS="lab-nano=crash_at_start,lab-spark=oom"``
    emulator faults per host (``SPECDEC_EMU_FAULT``); a host's several faults are written
    one after the other: ``lab-nx=slow_start:5,hang_after:3``.
``SPECDEC_LAB_INSTANCE=NAME``
    the lab instance (default ``demo``): its subnet gives the addresses, its directory the
    SSH key, the stand-in HF token and the pinned images (`specdec_lab.instance`).
``SPECDEC_LAB_MIRROR=HOST|none``
    which host runs the lab site's mirror (default: the fleet's first host; `specdec_lab.sites`):
    every host is at site ``lab`` and downloads and pulls through it; ``none``: no site, every
    host downloads straight from the lab's Hub.
``SPECDEC_LAB_REAL=0|1``
    whether the real-engine rows (an x86-cpu host running the real vLLM, `specdec_lab.vllmcpu`)
    are in the fleet (default 0: opt-in; ``make real-engine`` builds what they need). They come
    after every group, at fixed addresses; ``SPECDEC_LAB_HOSTS=0 SPECDEC_LAB_DYNAMO=0`` leaves
    only them.
``SPECDEC_LAB_DYNAMO=0|1``
    whether the inventory's Dynamo serving group rows are in the fleet (default 1). They come
    after the table's rows at fixed addresses (their number counts on from the table's
    length), so ``SPECDEC_LAB_HOSTS`` does not move them; ``SPECDEC_LAB_HOSTS=0`` leaves
    only them. ``fleet_groups`` (a fleet's further groups) join from ``FLEET_FROM`` table
    hosts on, after them.
``SPECDEC_LAB_OPTIONAL=NAME[,NAME]``
    opt-in hosts (the inventory's ``optional`` rows, e.g. ``lab-thor``) that join after all of
    the above at fixed addresses (numbered on from the table, groups and fleet groups); the
    default fleet has none. With one, ``SPECDEC_LAB_HOSTS=0`` (and ``SPECDEC_LAB_DYNAMO=0``)
    leaves only it.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from typing import Any

from specdec.catalog import load_catalog
from specdec.errors import ConfigError
from specdec_lab.hubsvc import ca_file as hub_ca_file
from specdec_lab.images import pinned_ref
from specdec_lab.instance import Instance
from specdec_lab.sites import mirror_host, site_keys

__all__ = [
    "DEFAULT_HOSTS",
    "DEFAULT_TIME_SCALE",
    "LAB_MEMLOCK",
    "fleet",
    "parse_faults",
    "real_on",
]

DEFAULT_HOSTS = 4
FLEET_FROM = 9  # table hosts from which a lab is a fleet: its further serving groups join
DEFAULT_TIME_SCALE = "0.1"
# RLIMIT_MEMLOCK is 8 MiB *hard* on the machines the lab runs on, and not even root can raise
# it (lab-feasibility.md: `docker run --ulimit memlock=-1` fails with EPERM and systemd silently
# keeps 8 MiB under LimitMEMLOCK=infinity). Real devices use "unlimited"; the lab declares its
# ceiling here, visibly, so the deploy renders and verifies what the host can actually grant.
LAB_MEMLOCK = 8388608


def parse_faults(text: str | None, hosts: Sequence[str]) -> dict[str, str]:
    """``"h1=f1,h2=f2:3,f3"`` -> ``{"h1": "f1", "h2": "f2:3,f3"}`` (unknown host: ValueError)."""
    faults: dict[str, list[str]] = {}
    current: str | None = None
    for item in (text or "").replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, fault = item.partition("=")
        if sep:
            current = name.strip()
            if current not in hosts:
                raise ValueError(f"SPECDEC_LAB_FAULTS: unknown lab host {current!r} "
                                 f"(hosts: {', '.join(hosts)})")
            item = fault.strip()
        if current is None:
            raise ValueError(f"SPECDEC_LAB_FAULTS: {item!r} names no host (write host=fault)")
        if item:
            faults.setdefault(current, []).append(item)
    return {h: ",".join(f) for h, f in faults.items()}


def _default_image(device_id: str, engine: str) -> str:
    cat = load_catalog()
    dev = cat.device(device_id)
    img = cat.default_image(dev, engine, "36.4.3" if dev.is_jetson else None)
    if img is None:
        raise ValueError(f"no catalog image for {device_id}/{engine}")
    return img.ref


def _count(env: Mapping[str, str], table_len: int, low: int = 1) -> int:
    text = env.get("SPECDEC_LAB_HOSTS", "").strip()
    if not text:
        return min(DEFAULT_HOSTS, table_len)
    if not text.isdigit() or not low <= int(text) <= table_len:
        raise ValueError(f"SPECDEC_LAB_HOSTS={text!r}: must be an integer in {low}..{table_len}")
    return int(text)


def real_on(env: Mapping[str, str]) -> bool:
    """``SPECDEC_LAB_REAL=0|1`` (default 0): whether the real-engine rows are in the fleet."""
    text = env.get("SPECDEC_LAB_REAL", "").strip() or "0"
    if text not in ("0", "1"):
        raise ValueError(f"SPECDEC_LAB_REAL={text!r}: must be 0 or 1")
    return text == "1"


def _dynamo_on(env: Mapping[str, str]) -> bool:
    text = env.get("SPECDEC_LAB_DYNAMO", "").strip() or "1"
    if text not in ("0", "1"):
        raise ValueError(f"SPECDEC_LAB_DYNAMO={text!r}: must be 0 or 1")
    return text == "1"


def _optional(env: Mapping[str, str], rows: Sequence[tuple[str, dict[str, Any]]],
              start: int) -> list[tuple[int, tuple[str, dict[str, Any]]]]:
    names = [n.strip() for n in env.get("SPECDEC_LAB_OPTIONAL", "").split(",") if n.strip()]
    known = [name for name, _ in rows]
    for name in names:
        if name not in known:
            raise ValueError(f"SPECDEC_LAB_OPTIONAL: unknown optional host {name!r} "
                             f"(optional hosts: {', '.join(known) or 'none'})")
    return [(n, row) for n, row in enumerate(rows, start=start) if row[0] in names]


def fleet(table: Sequence[tuple[str, dict[str, Any]]],
          env: Mapping[str, str] | None = None,
          groups: Sequence[tuple[str, dict[str, Any]]] = (),
          fleet_groups: Sequence[tuple[str, dict[str, Any]]] = (),
          optional: Sequence[tuple[str, dict[str, Any]]] = (),
          real: Sequence[tuple[str, dict[str, Any]]] = (),
          ) -> list[tuple[str, dict[str, Any]]]:
    """pyinfra host tuples for the table's first ``SPECDEC_LAB_HOSTS`` hosts.

    Each table row gives ``lab_device`` and the host's ``specdec_*`` choices; the n-th host
    (from 1) gets address ``10.X.<n>.2`` in the instance's subnet (``10.213`` for ``demo``),
    the instance's SSH settings, the lab memlock ceiling, the emulator image for its engine
    (docker runtime) and the emulator knobs in ``specdec_env``. ``optional``: rows that join
    when ``SPECDEC_LAB_OPTIONAL`` names them; ``real``: rows that run the real engine
    (`real_on`), numbered after every other, without emulator knobs.
    """
    env = os.environ if env is None else env
    try:
        inst = Instance.from_env(env)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    numbered = _numbered(env, table, groups, fleet_groups, optional, real)
    scale = env.get("SPECDEC_LAB_TIME_SCALE", "").strip() or DEFAULT_TIME_SCALE
    variant = env.get("SPECDEC_LAB_ACCEPTANCE", "").strip()  # the emulator's speculation world
    if variant and variant not in ("chain", "measured"):
        raise ValueError(f"SPECDEC_LAB_ACCEPTANCE={variant!r} is not one of chain, measured")
    faults = parse_faults(env.get("SPECDEC_LAB_FAULTS"),
                          [name for name, _ in (*table, *groups, *fleet_groups, *optional,
                                                *real)])
    mirror = mirror_host(env, [name for _, (name, _) in numbered])
    hosts = []
    for n, (name, row) in numbered:
        data = _host_data(inst, n, row)
        device = data["lab_device"]
        fault = row.get("lab_fault") or faults.get(name)
        emu: dict[str, str] = {}
        if load_catalog().device(device).is_cpu:
            if fault:
                raise ValueError(f"{name}: lab_fault={fault!r}: a real engine host has no "
                                 "emulated faults")
        else:
            emu = {"SPECDEC_EMU_DEVICE": device, "SPECDEC_EMU_TIME_SCALE": scale,
                   **({"SPECDEC_EMU_ACCEPTANCE": variant} if variant else {}),
                   **({"SPECDEC_EMU_FAULT": fault} if fault else {})}
        if fault:
            data["lab_fault"] = fault
        data["specdec_env"] = {**emu, **row.get("specdec_env", {})}
        if data.get("specdec_runtime", "docker") == "docker":
            # The lab's mirror of the catalog image (a row's `lab_image`, else the device's
            # default), digest-pinned: the planner sees the real image's release and contents.
            catalog_ref = row.get("lab_image") or _default_image(
                device, data.get("specdec_engine", "vllm"))
            data.setdefault("specdec_image", pinned_ref(catalog_ref, inst))
        # The lab's Hub, through the site's mirror (or straight, without a site).
        gateway = str(ipaddress.ip_address(inst.host_address(n)) - 1)
        for key, value in site_keys(name, gateway, mirror, str(hub_ca_file(inst))).items():
            data.setdefault(key, value)
        if not env.get("HF_TOKEN", "").strip():
            # The emulated Hub wants *a* token for gated repos; `lab up` writes a stand-in.
            data.setdefault("specdec_hf_token_file", str(inst.hf_token_file))
        hosts.append((name, data))
    return hosts


def _numbered(env: Mapping[str, str], table: Sequence[tuple[str, dict[str, Any]]],
              groups: Sequence[tuple[str, dict[str, Any]]],
              fleet_groups: Sequence[tuple[str, dict[str, Any]]],
              optional: Sequence[tuple[str, dict[str, Any]]],
              real: Sequence[tuple[str, dict[str, Any]]],
              ) -> list[tuple[int, tuple[str, dict[str, Any]]]]:
    """The rows in the fleet, each with its fixed number (its address): the table's, the
    groups', the optional hosts named, then the real engine's."""
    with_groups = bool(groups) and _dynamo_on(env)
    with_real = bool(real) and real_on(env)
    extra = _optional(env, optional, len(table) + len(groups) + len(fleet_groups) + 1)
    count = _count(env, len(table), 0 if with_groups or with_real or extra else 1)
    numbered = list(enumerate(table, start=1))[:count]
    if with_groups:
        numbered += list(enumerate(groups, start=len(table) + 1))
        if count >= FLEET_FROM:
            numbered += list(enumerate(fleet_groups, start=len(table) + len(groups) + 1))
    numbered += extra
    if with_real:
        first = len(table) + len(groups) + len(fleet_groups) + len(optional) + 1
        numbered += list(enumerate(real, start=first))
    return numbered


def _host_data(inst: Instance, n: int, row: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {
        # Each host lives in its own network namespace behind a /30 veth (10.X.n.1 is
        # this machine's side); its sshd accepts root with the instance's key only.
        "ssh_hostname": inst.host_address(n),
        "ssh_user": "root",
        "ssh_key": str(inst.key_file),
        # Lab host keys are regenerated on every `lab up`: nothing to pin.
        "ssh_known_hosts_file": "/dev/null",
        "ssh_strict_host_key_checking": "no",
        "specdec_memlock": LAB_MEMLOCK,
        # the instance's own API key and serving groups' CAs (made by `lab up` / the deploy)
        "specdec_api_key_file": str(inst.api_key_file),
        "specdec_pki_dir": str(inst.pki_dir),
        **row,
    }
    data.setdefault("specdec_device", data["lab_device"])
    return data
