"""The lab's view of an inventory: which hosts to boot, as what device, at which address.

The lab reads the same inventory file pyinfra deploys to
(`specdec.config.inventory.load_inventory`),
so the two cannot drift. Per host it uses ``ssh_hostname`` (the host's address: the ``.2`` of a
/30 in the lab instance's subnet whose ``.1`` is the control node's side), ``lab_device`` (else
``specdec_device``), ``lab_fault``, ``lab_link`` (delay, jitter, loss on its link:
`specdec_lab.link`), ``specdec_port``. Lab-only keys are prefixed ``lab_``;
pyinfra ignores them.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import asdict, dataclass
from typing import Any

from specdec.catalog import load_catalog
from specdec.config.inventory import load_inventory
from specdec_lab.errors import LabError
from specdec_lab.instance import Instance
from specdec_lab.link import Link, parse_link

__all__ = ["HOST_NAME", "LabHost", "lab_hosts", "parse_lab_hosts"]

HOST_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,30}")


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
    instance: str  # the lab instance (specdec_lab.instance) the host belongs to
    link: Link | None = None  # link conditions on its veth (lab_link)

    @property
    def netns(self) -> str:
        """Its network namespace; also its nspawn machine name and its overlay's name."""
        return Instance(self.instance).netns(self.name)

    @property
    def veth(self) -> str:
        return Instance(self.instance).veth(self.index)  # control side

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LabHost:
        kw = {k: d[k] for k in cls.__dataclass_fields__ if k != "link"}
        return cls(**kw, link=parse_link(str(d.get("name")), d.get("link")))


def _fail(host: str, key: str, value: Any, why: str) -> LabError:
    return LabError(f"{key}={value!r}: {why}", host=host)


def parse_lab_hosts(hosts: list[tuple[str, dict[str, Any]]],
                    instance: Instance | None = None) -> list[LabHost]:
    """Validate the inventory hosts as hosts of ``instance`` (default: from the environment):
    device, address in the instance's subnet, uniqueness."""
    inst = instance or Instance.from_env()
    net = inst.subnet
    catalog = load_catalog()
    out: list[LabHost] = []
    seen_addr: dict[str, str] = {}
    for name, data in hosts:
        if not HOST_NAME.fullmatch(name):
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
        if addr.version != 4 or addr not in net or int(addr) % 4 != 2:
            raise _fail(name, "ssh_hostname", addr_text,
                        f"must be the .2 of a /30 in {net}, the subnet of lab instance "
                        f"{inst.name!r} (e.g. {inst.host_address(1)})")
        if str(addr) in seen_addr:
            raise _fail(name, "ssh_hostname", addr_text,
                        f"address collision with host {seen_addr[str(addr)]}")
        seen_addr[str(addr)] = name
        index = (int(addr) - int(net.network_address)) // 4
        port = data.get("specdec_port") or 8000
        fault = data.get("lab_fault")
        if fault is not None and (not isinstance(fault, str) or not fault.strip()):
            raise _fail(name, "lab_fault", fault, "must be a fault spec string")
        out.append(LabHost(
            name=name, device=str(device), address=str(addr),
            gateway=str(ipaddress.ip_address(int(addr) - 1)), index=index, port=int(port),
            fault=fault, engine=str(data.get("specdec_engine") or "vllm"),
            runtime=str(data.get("specdec_runtime") or "docker"), instance=inst.name,
            link=parse_link(name, data.get("lab_link")),
        ))
    return out


def lab_hosts(inventory: str, limit: str | None = None,
              instance: Instance | None = None) -> list[LabHost]:
    return parse_lab_hosts(load_inventory(inventory, limit), instance)
