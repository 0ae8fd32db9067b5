"""The lab's view of an inventory: which hosts to boot, as what device, at which address.

The lab reads the same inventory file pyinfra deploys to (`specdec.inventory.load_inventory`),
so the two cannot drift. Per host it uses ``ssh_hostname`` (the host's address: the ``.2`` of a
/30 whose ``.1`` is the control node's side), ``lab_device`` (else ``specdec_device``),
``lab_fault``, ``specdec_port``. Lab-only keys are prefixed ``lab_``; pyinfra ignores them.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import asdict, dataclass
from typing import Any

from specdec.catalog import load_catalog
from specdec.errors import LabError

__all__ = ["LabHost", "lab_hosts", "parse_lab_hosts"]

_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,30}")
LAB_NET = ipaddress.ip_network("10.213.0.0/16")


@dataclass(frozen=True)
class LabHost:
    name: str
    device: str
    address: str  # host side (inside its namespace)
    gateway: str  # control-node side of the veth
    index: int  # unique small number: names the veth
    port: int
    fault: str | None
    engine: str
    runtime: str

    @property
    def netns(self) -> str:
        return f"specdec-lab-{self.name}"

    @property
    def veth(self) -> str:
        return f"sdlab{self.index}"  # control side; <= 15 characters

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LabHost:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


def _fail(host: str, key: str, value: Any, why: str) -> LabError:
    return LabError(f"{key}={value!r}: {why}", host=host)


def parse_lab_hosts(hosts: list[tuple[str, dict[str, Any]]]) -> list[LabHost]:
    """Validate the inventory hosts as lab hosts (device, address, uniqueness)."""
    catalog = load_catalog()
    out: list[LabHost] = []
    seen_addr: dict[str, str] = {}
    for name, data in hosts:
        if not _NAME.fullmatch(name):
            raise _fail(name, "host", name, "lab host names are lowercase letters, digits and -")
        device = data.get("lab_device") or data.get("specdec_device")
        if device is None:
            raise _fail(name, "lab_device", None, "a lab host needs lab_device or specdec_device")
        if device not in catalog.devices:
            raise _fail(name, "lab_device", device,
                        f"unknown device; known: {', '.join(sorted(catalog.devices))}")
        declared = data.get("specdec_device")
        if declared is not None and declared != device:
            raise _fail(name, "specdec_device", declared,
                        f"disagrees with lab_device={device!r} (the host identifies as {device})")
        addr_text = data.get("ssh_hostname")
        try:
            addr = ipaddress.ip_address(str(addr_text))
        except ValueError:
            raise _fail(name, "ssh_hostname", addr_text, "a lab host needs an IPv4 address") \
                from None
        if addr.version != 4 or addr not in LAB_NET or int(addr) % 4 != 2:
            raise _fail(name, "ssh_hostname", addr_text,
                        f"must be the .2 of a /30 in {LAB_NET} (e.g. 10.213.1.2)")
        if str(addr) in seen_addr:
            raise _fail(name, "ssh_hostname", addr_text,
                        f"address collision with host {seen_addr[str(addr)]}")
        seen_addr[str(addr)] = name
        index = (int(addr) - int(LAB_NET.network_address)) // 4
        port = data.get("specdec_port") or 8000
        fault = data.get("lab_fault")
        if fault is not None and (not isinstance(fault, str) or not fault.strip()):
            raise _fail(name, "lab_fault", fault, "must be a fault spec string")
        out.append(LabHost(
            name=name, device=str(device), address=str(addr),
            gateway=str(ipaddress.ip_address(int(addr) - 1)), index=index, port=int(port),
            fault=fault, engine=str(data.get("specdec_engine") or "vllm"),
            runtime=str(data.get("specdec_runtime") or "docker"),
        ))
    return out


def lab_hosts(inventory: str, limit: str | None = None) -> list[LabHost]:
    from specdec.inventory import load_inventory

    return parse_lab_hosts(load_inventory(inventory, limit))
