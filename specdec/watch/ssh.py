"""The watch's way to a host: OpenSSH with the inventory's own connection data, one session per
host running the on-host reader (`specdec.watch.reader`) against the engine on the host.

Why OpenSSH and not pyinfra's connection: the reader is a long-lived stream (one session per
host for as long as the watch runs, its end noticed by ServerAlive probes), which pyinfra's
``run_shell_command`` does not offer; and an operator's ``~/.ssh/config``, agent, ProxyJump and
certificates apply as they do to their own ``ssh``. It reads the same pyinfra host data the
deploy connects with (pyinfra 3.10 ``pyinfra/connectors/ssh.py`` ``ConnectorData``):
``ssh_hostname`` (else the inventory name), ``ssh_user``, ``ssh_port``, ``ssh_key``,
``ssh_config_file``, ``ssh_known_hosts_file`` and ``ssh_strict_host_key_checking`` (pyinfra's
default ``accept-new``, which OpenSSH 7.6+ knows; ``off`` is pyinfra's spelling of ``no``).
Password logins cannot run unattended (``BatchMode``): a host with ``ssh_password`` is refused
with one line. No root is needed: the reader only reads loopback HTTP and
``/var/lib/specdec``'s pointers.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from specdec.config.hygiene import check_host_name, check_text
from specdec.errors import ConfigError

__all__ = ["Connection", "Session", "connection", "reader_code", "reader_command"]

_POLICIES = {"accept-new": "accept-new", "yes": "yes", "no": "no", "off": "no", "ask": "yes"}
MAX_LINE = 4 * 1024 * 1024  # a reader's line is a few kB: more is not the reader talking


def reader_code() -> str:
    """The on-host reader's source (sent as ``python3 -I -c``: nothing is written on the host)."""
    return resources.files("specdec.watch").joinpath("reader.py").read_text()


@dataclass(frozen=True)
class Connection:
    host: str  # inventory name
    destination: str
    user: str | None = None
    port: int | None = None
    key: str | None = None
    config_file: str | None = None
    known_hosts: str | None = None
    strict: str = "accept-new"

    def argv(self, remote: str, connect_timeout: int = 10) -> list[str]:
        cmd = ["ssh"]
        if self.config_file:
            cmd += ["-F", self.config_file]
        cmd += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout}",
                "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3",
                "-o", f"StrictHostKeyChecking={self.strict}", "-o", "LogLevel=ERROR"]
        if self.known_hosts:
            cmd += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        if self.key:
            cmd += ["-i", self.key, "-o", "IdentitiesOnly=yes"]
        if self.port:
            cmd += ["-p", str(self.port)]
        if self.user:
            cmd += ["-l", self.user]
        return [*cmd, "--", self.destination, remote]


def _opt(host: str, data: Mapping[str, Any], key: str) -> str | None:
    v = data.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ConfigError(f"{key}={v!r}: must be a string", host=host)
    check_text(host, key, v, 4096)
    return v


def connection(host: str, data: Mapping[str, Any]) -> Connection:
    """The host's SSH connection from its inventory data (bad values: one-line `ConfigError`)."""
    if data.get("ssh_password") or data.get("ssh_key_password"):
        key = "ssh_password" if data.get("ssh_password") else "ssh_key_password"
        raise ConfigError(f"{key} is set: specdec watch reads hosts unattended (BatchMode); "
                          "use a key without a passphrase or the SSH agent", host=host)
    if host.startswith("@") and not host.startswith("@ssh/"):
        raise ConfigError(f"{host.split('/', 1)[0]}: specdec watch reaches hosts over SSH only",
                          host=host)
    name = host.rsplit("/", 1)[-1]
    dest = _opt(host, data, "ssh_hostname") or name
    if dest.startswith("-") or any(c.isspace() for c in dest):
        raise ConfigError(f"ssh_hostname={dest!r}: not a host name or address", host=host)
    port = data.get("ssh_port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int)
                             or not 1 <= port <= 65535):
        raise ConfigError(f"ssh_port={port!r}: must be an integer in 1..65535", host=host)
    user = _opt(host, data, "ssh_user")
    if user is not None and (user.startswith("-") or not user.strip()):
        raise ConfigError(f"ssh_user={user!r}: not a user name", host=host)
    strict = data.get("ssh_strict_host_key_checking", "accept-new")
    if strict not in _POLICIES:
        raise ConfigError(f"ssh_strict_host_key_checking={strict!r}: must be one of "
                          f"{', '.join(_POLICIES)}", host=host)
    check_host_name(host)
    return Connection(host, dest, user, port, _opt(host, data, "ssh_key"),
                      _opt(host, data, "ssh_config_file"),
                      _opt(host, data, "ssh_known_hosts_file"), _POLICIES[str(strict)])


def reader_command(state_dir: str | None = None) -> str:
    """The shell command that runs the reader on the host."""
    return "python3 -I -c " + shlex.quote(reader_code()) + (
        f" {shlex.quote(state_dir)}" if state_dir else "")


class Session:
    """One reader on one host: ``hello`` (what runs there), then `configure`, then `lines`.
    ``argv``: run something else than ``ssh`` (tests run the reader locally)."""

    def __init__(self, conn: Connection, argv: list[str] | None = None) -> None:
        self.conn = conn
        cmd = argv if argv is not None else conn.argv(reader_command())
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)

    def hello(self) -> dict[str, Any]:
        line = self._line()
        doc = _json(line)
        hello = doc.get("hello") if isinstance(doc, dict) else None
        if not isinstance(hello, dict):
            raise OSError(self._why(line))
        return hello

    def configure(self, config: Mapping[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(config, separators=(",", ":")) + "\n")
        self.proc.stdin.flush()
        if not config.get("follow"):
            self.proc.stdin.close()

    def lines(self) -> Iterator[dict[str, Any]]:
        """Each window's report until the reader ends (``OSError`` when it failed)."""
        while True:
            line = self._line()
            if not line:
                if self.close() not in (0, None):
                    raise OSError(self._why(""))
                return
            doc = _json(line)
            w = doc.get("w") if isinstance(doc, dict) else None
            if not isinstance(w, dict):
                raise OSError(f"the reader printed {line.strip()[:100]!r}")
            yield w

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline(MAX_LINE)
        if len(line) >= MAX_LINE and not line.endswith("\n"):
            raise OSError(f"the reader printed a line over {MAX_LINE} bytes")
        return line

    def _why(self, line: str) -> str:
        self.close()
        err = ""
        if self.proc.stderr is not None:
            try:
                err = " ".join(self.proc.stderr.read()[-600:].split())
            except (OSError, ValueError):
                err = ""
        tail = err.splitlines()[-1] if err else line.strip()[:160]
        return f"ssh exited {self.proc.returncode}" + (f": {tail[-200:]}" if tail else "")

    def close(self) -> int | None:
        if self.proc.poll() is None:
            try:
                if self.proc.stdin is not None and not self.proc.stdin.closed:
                    self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def _json(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None
