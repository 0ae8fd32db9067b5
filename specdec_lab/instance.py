"""Lab instances: several labs side by side on one machine, each with its own state, names,
subnet and teardown.

The instance comes from ``SPECDEC_LAB_INSTANCE`` (default ``demo``; ``specdec lab --instance``
sets it), read by ``specdec lab`` and by the lab inventory alike. Its name is 1 to 6 lowercase
letters: it is part of interface names, which Linux caps at 15 characters. Per instance:

========== ==================================================================================
state      ``/var/lib/specdec-lab/<name>/``: ``state.json``, ``lock``, ``hosts/``,
           ``id_ed25519`` (the SSH key), ``hf_token``
netns      ``specdec-lab-<name>-<host>`` (also the nspawn machine and the overlay mount's name)
veth       ``sdl<name><index>``, control side (index: the host's /30 in the subnet)
subnet     ``10.213.0.0/16`` for ``demo``, ``10.214.0.0/16`` for ``test``, any other name
           ``10.<215..254>.0.0/16`` from a hash of it (``lab up`` refuses a subnet in use)
========== ==================================================================================
"""

from __future__ import annotations

import ipaddress
import os
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from specdec.errors import ConfigError
from specdec_lab import paths

__all__ = ["DEFAULT_INSTANCE", "ENV", "Instance"]

ENV = "SPECDEC_LAB_INSTANCE"
DEFAULT_INSTANCE = "demo"
_NAME = re.compile(r"[a-z]{1,6}")
_FIXED_OCTET = {"demo": 213, "test": 214}


@dataclass(frozen=True)
class Instance:
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigError(f"{ENV}={self.name!r}: a lab instance name is 1 to 6 lowercase "
                           "letters (e.g. demo, test)")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Instance:
        env = os.environ if env is None else env
        return cls(env.get(ENV, "").strip() or DEFAULT_INSTANCE)

    # -- files ---------------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return paths.LAB_ROOT / self.name

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def lock_file(self) -> Path:
        return self.dir / "lock"

    @property
    def hosts_dir(self) -> Path:
        return self.dir / "hosts"

    @property
    def key_file(self) -> Path:
        """The instance's SSH key (public half: ``key_file`` + ``.pub``)."""
        return self.dir / "id_ed25519"

    @property
    def hf_token_file(self) -> Path:
        """A stand-in Hugging Face token for the emulated Hub (when $HF_TOKEN is not set)."""
        return self.dir / "hf_token"

    @property
    def api_key_file(self) -> Path:
        """The instance's API key (every host's API requires it)."""
        return self.dir / "api_key"

    @property
    def pki_dir(self) -> Path:
        """The instance's CAs (serving groups', the API's, the site's) and certificates."""
        return self.dir / "pki"

    @property
    def api_ca_file(self) -> Path:
        """The CA of every lab host's API certificate (`specdec.config.pki.api_authority`)."""
        return self.pki_dir / "_api" / "ca.crt"

    def host_dir(self, host: str) -> Path:
        return self.hosts_dir / host

    # -- names and addresses -------------------------------------------------------------

    @property
    def prefix(self) -> str:
        """Prefix of the instance's namespaces, machines and overlay mounts."""
        return f"specdec-lab-{self.name}-"

    @property
    def veth_prefix(self) -> str:
        return f"sdl{self.name}"

    def netns(self, host: str) -> str:
        return self.prefix + host

    def veth(self, index: int) -> str:
        return f"{self.veth_prefix}{index}"  # <= 14 characters: the peer adds an "h"

    def is_veth(self, name: str) -> bool:
        return re.fullmatch(re.escape(self.veth_prefix) + r"[0-9]{1,5}", name) is not None

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        octet = _FIXED_OCTET.get(self.name)
        if octet is None:
            octet = 215 + zlib.crc32(self.name.encode()) % 40
        return ipaddress.IPv4Network(f"10.{octet}.0.0/16")

    def host_address(self, n: int) -> str:
        """The n-th host's address (from 1): the ``.2`` of ``10.X.n.0/30``."""
        if not 1 <= n <= 255:
            raise ValueError(f"lab host number {n}: must be in 1..255")
        return str(self.subnet.network_address + n * 256 + 2)

    # -- the other instances -------------------------------------------------------------

    def others_up(self) -> list[Instance]:
        """Other instances that have a state file (up, or not cleanly down)."""
        found: list[Instance] = []
        try:
            entries = sorted(paths.LAB_ROOT.iterdir())
        except OSError:
            return found
        for d in entries:
            if d.name != self.name and _NAME.fullmatch(d.name) and (d / "state.json").is_file():
                found.append(Instance(d.name))
        return found

    def legacy_state(self) -> Path | None:
        """The state file of a lab started before instances existed, if one is up."""
        old = paths.LAB_ROOT / "state.json"
        return old if old.is_file() else None
