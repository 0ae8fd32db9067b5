"""Fleet state shared by control nodes: a small key-value store with create-if-absent and
compare-and-swap, either a local directory (one control node, the default) or etcd.

Keys are ``/``-separated names of ``[A-Za-z0-9._-]`` segments; values are text (JSON by
convention). What `specdec rollout --shard` keeps there: the run's identity, the canary's
verdict, the fleet-wide failure counters and stop flag, one claim per host, and the tune cache
entries (`specdec.fleet.shard`).

etcd is reached through its v3 gRPC-gateway JSON API with the standard library (etcd 3.4, as
Debian 12 ships it: ``POST /v3/kv/range``, ``/v3/kv/put``, ``/v3/kv/txn``; keys and values
base64; https://etcd.io/docs/v3.4/dev-guide/api_grpc_gateway/, messages as in
etcd ``api/etcdserverpb/rpc.proto``). A create is a transaction comparing the key's
``version`` with 0; a swap compares its ``value``. TLS plugs in as `TLSFiles` (CA, client
certificate and key: etcd's ``--trusted-ca-file`` / ``--client-cert-auth`` on the server).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specdec.config.hygiene import show
from specdec.errors import RolloutError

__all__ = ["EtcdStore", "FleetStore", "LocalStore", "TLSFiles", "open_store", "update_json"]

_SEGMENT = re.compile(r"[A-Za-z0-9._-]{1,200}")


def _check_key(key: str) -> str:
    parts = key.split("/")
    if not key or any(not _SEGMENT.fullmatch(p) or p in (".", "..") for p in parts):
        raise RolloutError(f"fleet store key {key!r}: use segments of letters, digits, . _ -")
    return key


class FleetStore(Protocol):
    def get(self, key: str) -> str | None: ...
    def put(self, key: str, value: str) -> None: ...
    def create(self, key: str, value: str) -> bool: ...
    def swap(self, key: str, old: str | None, new: str) -> bool: ...
    def list(self, prefix: str) -> dict[str, str]: ...
    def describe(self) -> str: ...


def update_json(store: FleetStore, key: str, change: Callable[[Any], Any],
                attempts: int = 200) -> Any:
    """Read-modify-write a JSON value with compare-and-swap; returns the value written."""
    for _ in range(attempts):
        old = store.get(key)
        new = change(json.loads(old) if old is not None else None)
        text = json.dumps(new, sort_keys=True)
        if store.swap(key, old, text):
            return new
    raise RolloutError(f"fleet store {store.describe()}: {key} kept changing under "
                       f"{attempts} attempts")


class LocalStore:
    """A directory: one file per key; writes under an ``flock`` of ``.lock``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RolloutError(f"--store={str(root)!r}: {exc.strerror or exc}") from None

    def describe(self) -> str:
        return str(self.root)

    def _path(self, key: str) -> Path:
        return self.root / _check_key(key)

    def _locked(self) -> Any:
        fh = open(self.root / ".lock", "a")  # noqa: SIM115 - closed by _Held
        fcntl.flock(fh, fcntl.LOCK_EX)
        return _Held(fh)

    def _write(self, path: Path, value: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(value)
        tmp.replace(path)

    def get(self, key: str) -> str | None:
        try:
            return self._path(key).read_text()
        except FileNotFoundError:
            return None

    def put(self, key: str, value: str) -> None:
        with self._locked():
            self._write(self._path(key), value)

    def create(self, key: str, value: str) -> bool:
        return self.swap(key, None, value)

    def swap(self, key: str, old: str | None, new: str) -> bool:
        path = self._path(key)
        with self._locked():
            try:
                now: str | None = path.read_text()
            except FileNotFoundError:
                now = None
            if now != old:
                return False
            self._write(path, new)
            return True

    def list(self, prefix: str) -> dict[str, str]:
        base = self._path(prefix)
        if not base.is_dir():
            return {}
        return {p.relative_to(self.root).as_posix(): p.read_text()
                for p in sorted(base.rglob("*")) if p.is_file() and not p.name.startswith(".")}


class _Held:
    def __init__(self, fh: Any) -> None:
        self.fh = fh

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


@dataclass(frozen=True)
class TLSFiles:
    """TLS for etcd: the CA that signed the server, and the client's certificate and key."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca) if self.ca else None)
        if self.cert is not None:
            ctx.load_cert_chain(str(self.cert), str(self.key) if self.key else None)
        return ctx


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _unb64(text: object) -> str:
    """A key or value etcd returned (base64 of UTF-8 text; anything else is refused)."""
    try:
        return base64.b64decode(text if isinstance(text, str) else "", validate=True).decode()
    except ValueError:
        raise RolloutError("fleet store etcd: a key or value is not base64 of UTF-8 text") \
            from None


def _range_end(prefix: str) -> str:
    """etcd's range end for a prefix: the prefix with its last byte plus one."""
    raw = prefix.encode()
    return base64.b64encode(raw[:-1] + bytes([raw[-1] + 1])).decode()


class EtcdStore:
    """etcd v3 through its JSON gateway; keys live under ``prefix``."""

    def __init__(self, endpoints: list[str], prefix: str = "specdec",
                 tls: TLSFiles | None = None, timeout: float = 10.0) -> None:
        self.endpoints = endpoints
        self.prefix = _check_key(prefix) + "/"
        self.tls = tls
        self.timeout = timeout
        self._ctx = tls.context() if tls is not None and endpoints[0].startswith("https") \
            else None

    def describe(self) -> str:
        return ",".join(self.endpoints)

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        last = ""
        for ep in self.endpoints:
            req = urllib.request.Request(ep.rstrip("/") + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"},
                                         method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout,  # noqa: S310
                                            context=self._ctx) as resp:
                    out = json.loads(resp.read() or b"{}")
                    return out if isinstance(out, dict) else {}
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}: {exc.read()[:200]!r}"
            except (OSError, ValueError) as exc:
                last = f"{type(exc).__name__}: {exc}"
        raise RolloutError(f"fleet store etcd {self.describe()}: {path} failed ({last})")

    def _key(self, key: str) -> str:
        return _b64(self.prefix + _check_key(key))

    def get(self, key: str) -> str | None:
        kvs = self._call("/v3/kv/range", {"key": self._key(key)}).get("kvs") or []
        return _unb64(kvs[0].get("value", "")) if kvs else None

    def put(self, key: str, value: str) -> None:
        self._call("/v3/kv/put", {"key": self._key(key), "value": _b64(value)})

    def create(self, key: str, value: str) -> bool:
        return self.swap(key, None, value)

    def swap(self, key: str, old: str | None, new: str) -> bool:
        k = self._key(key)
        cmp: dict[str, Any] = {"key": k, "result": "EQUAL"}
        if old is None:
            cmp.update(target="VERSION", version="0")
        else:
            cmp.update(target="VALUE", value=_b64(old))
        out = self._call("/v3/kv/txn", {"compare": [cmp], "success": [
            {"request_put": {"key": k, "value": _b64(new)}}]})
        return bool(out.get("succeeded"))

    def list(self, prefix: str) -> dict[str, str]:
        full = self.prefix + _check_key(prefix) + "/"
        out = self._call("/v3/kv/range", {"key": _b64(full), "range_end": _range_end(full)})
        return {_unb64(kv.get("key"))[len(self.prefix):]: _unb64(kv.get("value", ""))
                for kv in out.get("kvs") or [] if isinstance(kv, dict)}


def open_store(url: str, tls: TLSFiles | None = None) -> FleetStore:
    """``etcd://HOST:PORT[,HOST:PORT…]`` (``etcds://``: TLS), or a directory."""
    for scheme, http in (("etcd://", "http://"), ("etcds://", "https://")):
        if url.startswith(scheme):
            hosts = url[len(scheme):].split(",")
            if any(not re.fullmatch(r"[A-Za-z0-9.-]+:[0-9]{1,5}", h) for h in hosts):
                raise RolloutError(f"--store={show(url)}: expected {scheme}HOST:PORT[,HOST:PORT]")
            if http == "http://" and tls is not None:  # it ran plaintext, the files unused
                raise RolloutError(f"--store={show(url)}: plaintext, but TLS files are given "
                                   f"(--store-ca/--store-cert/--store-key); use etcds://")
            if http == "https://" and (tls is None or tls.ca is None):
                raise RolloutError(f"--store={show(url)}: TLS needs --store-ca (and a client "
                                   "certificate when etcd asks for one)")
            return EtcdStore([http + h for h in hosts], tls=tls)
    if tls is not None:
        raise RolloutError(f"--store={show(url)}: --store-ca/--store-cert are for etcds://")
    if "://" in url:
        raise RolloutError(f"--store={show(url)}: expected a directory, etcd://HOST:PORT or "
                           "etcds://HOST:PORT")
    return LocalStore(Path(url).expanduser().resolve())
