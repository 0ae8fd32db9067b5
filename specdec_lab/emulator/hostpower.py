"""The host's power mode, as the emulated GPU feels it.

On a Jetson, ``nvpmodel`` caps the memory clock (EMC) per mode, so decode gets slower in a
15W mode than in MAXN_SUPER, immediately and for processes already running. The emulator reads
the same state the tools keep: ``/etc/nvpmodel.conf`` (mode ids and names) and
``/var/lib/nvpmodel/status`` (``pmode:0002 …``). Natively these are the host's files; in a
container the lab's ``nvidia-container-runtime`` bind-mounts them read-only (as NVIDIA's runtime
mounts host files into Jetson containers). No conf (DGX Spark, a laptop): no mode, the device's
peak bandwidth.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from specdec.host.power import CONF_PATH, STATUS_PATH, state_from_files

__all__ = ["HostPower"]


class HostPower:
    """Polls the power-mode files; `current` is cheap (a stat at most every ``interval_s``)."""

    def __init__(self, root: Path | str = "/", interval_s: float = 0.5) -> None:
        self.conf = Path(root) / CONF_PATH.lstrip("/")
        self.status = Path(root) / STATUS_PATH.lstrip("/")
        self.interval_s = interval_s
        self._checked = -1e18
        self._stamp: tuple[int, int] | None = None
        self._mode: str | None = None
        self._read()

    def _stat(self) -> tuple[int, int]:
        def mtime(p: Path) -> int:
            try:
                return os.stat(p).st_mtime_ns
            except OSError:
                return 0
        return mtime(self.conf), mtime(self.status)

    def _read(self) -> None:
        self._stamp = self._stat()
        try:
            conf = self.conf.read_text()
        except OSError:
            self._mode = None
            return
        try:
            status: str | None = self.status.read_text()
        except OSError:
            status = None
        state = state_from_files({"conf": conf, "status": status})
        self._mode = state.current[0] if state is not None and state.current else None

    @property
    def mode(self) -> str | None:
        """The mode name last read (None: no nvpmodel state on this host)."""
        return self._mode

    def poll(self) -> bool:
        """Re-read when the files changed (at most every ``interval_s``); True if the mode did."""
        now = time.monotonic()
        if now - self._checked < self.interval_s:
            return False
        self._checked = now
        if self._stat() == self._stamp:
            return False
        before = self._mode
        self._read()
        return self._mode != before
