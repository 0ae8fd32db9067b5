"""The lab's Hugging Face Hub: an HTTP endpoint the real ``huggingface_hub`` client downloads
from, counting every byte it serves.

What it answers is what ``hf download`` asks (fleet.md §1, verified against huggingface_hub
0.33.5, 0.36.0 and 2.2.0 in ``tests/unit/test_lab_hub.py``):

* ``GET /api/models/{repo}[/revision/{rev}]``: the commit (``sha``) and ``siblings``;
* ``GET /api/models/{repo}/tree/{rev}``: the file list with ``oid``, ``size`` and ``lfs``
  (huggingface_hub >= 1.22 lists a snapshot from it);
* ``HEAD``/``GET /{repo}/resolve/{rev}/{file}``: a small file with ``X-Repo-Commit``, its git
  blob id as ``ETag`` and ``Content-Length``; the LFS weights as a 302 to the CDN port with
  ``X-Linked-Etag`` (the sha256) and ``X-Linked-Size``, the Location signed and expiring as
  the Hub's CDN URLs are (a request whose signature does not check gets 403, as from the
  CDN); ``Range: bytes=N-`` gets a 206 (what a resumed download sends);
* a gated repo (`specdec_lab.hubrepo.is_gated`): metadata and file list for anyone, as on the
  Hub (huggingface.co/docs/hub/models-gated); its files only with a token the lab issued:
  otherwise 401 ``X-Error-Code: GatedRepo``; an unknown token gets 401 "Invalid credentials";
* never an ``X-Xet-*`` header or ``xetHash``: the client downloads over plain HTTP.

Bytes of bodies are counted per kind (api, resolve, cdn), per repo revision and per client
(`Counters`); ``GET /_lab/counters`` returns them, ``POST /_lab/reset`` clears them, ``POST
/_lab/fault`` cuts the next matching download after N bytes (to test resuming) and ``POST
/_lab/config`` sets a shared egress rate (the site's WAN). Those four answer the control node
only. The request log names method, path (no query), status, bytes and whether a token came;
never the token.

It serves HTTPS (``--cert``/``--key``: a certificate of the lab instance's own CA, which the
lab's hosts are given as ``specdec_hub_ca_file``), as the Hub and its CDN do; its CDN redirects
then name https too.

Run: ``python3 -m specdec_lab.hub --bind ADDR [--bind ADDR ...] --port P --cdn-port C
--tokens FILE [--scale X] [--log FILE] [--cert FILE --key FILE]``.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from specdec_lab.hubrepo import HubRepo, RepoFile, hub_repo

__all__ = ["DEFAULT_SCALE", "Counters", "Hub", "main", "serve"]

DEFAULT_SCALE = 1e-3  # served weights per byte of real weights
CHUNK = 65536
URL_TTL = 3600  # seconds a CDN URL stays valid


class Counters:
    """Bytes and requests served, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with getattr(self, "_lock", threading.Lock()):
            self.requests = 0
            self.bytes = 0
            self.by_kind: dict[str, dict[str, int]] = {}
            self.by_revision: dict[str, int] = {}
            self.by_client: dict[str, int] = {}
            self.statuses: dict[str, int] = {}
            self.with_token = 0
            self.ranges: list[dict[str, Any]] = []
            self.sizes: dict[str, int] = {}

    def add(self, kind: str, client: str, status: int, sent: int, token: bool,
            revision: str | None = None, size: int = 0, range_start: int | None = None,
            path: str = "") -> None:
        with self._lock:
            self.requests += 1
            self.bytes += sent
            k = self.by_kind.setdefault(kind, {"requests": 0, "bytes": 0})
            k["requests"] += 1
            k["bytes"] += sent
            self.by_client[client] = self.by_client.get(client, 0) + sent
            self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1
            self.with_token += token
            if revision is not None:
                self.by_revision[revision] = self.by_revision.get(revision, 0) + sent
                self.sizes[revision] = size
            if range_start is not None:
                self.ranges = [*self.ranges[-199:], {"path": path, "start": range_start,
                                                     "status": status, "bytes": sent}]

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            copies = {r: round(b / self.sizes[r], 4) for r, b in self.by_revision.items()
                      if self.sizes.get(r)}
            return {"requests": self.requests, "bytes": self.bytes,
                    "by_kind": json.loads(json.dumps(self.by_kind)),
                    "by_revision": dict(self.by_revision), "revision_size": dict(self.sizes),
                    "copies": copies, "by_client": dict(self.by_client),
                    "statuses": dict(self.statuses), "with_token": self.with_token,
                    "ranges": list(self.ranges)}


class Limiter:
    """A shared egress rate (bytes/s; None: unlimited): each chunk waits its turn."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rate: float | None = None
        self._next = 0.0

    def take(self, n: int) -> None:
        with self._lock:
            if not self.rate:
                return
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + n / self.rate
        if start > now:
            time.sleep(start - now)


class Hub:
    """What both ports share: repos, tokens, counters, faults, the signing key, the rate."""

    def __init__(self, token_hashes: Iterable[str], scale: float = DEFAULT_SCALE,
                 log: Path | None = None) -> None:
        self.token_hashes = frozenset(token_hashes)
        self.scale = scale
        self.counters = Counters()
        self.limiter = Limiter()
        self.key = hashlib.sha256(str(time.time_ns()).encode()).digest()
        self.faults: list[dict[str, Any]] = []
        self.control: set[str] = {"127.0.0.1", "::1"}
        self.lfs: dict[str, HubRepo] = {}  # sha256 -> repo
        self._lock = threading.Lock()
        self._log = open(log, "a", buffering=1) if log is not None else None  # noqa: SIM115

    def repo(self, repo_id: str) -> HubRepo | None:
        repo = hub_repo(repo_id, self.scale)
        if repo is not None:
            with self._lock:  # the CDN serves the weights of repos resolved so far
                self.lfs.update({f.sha256: repo for f in repo.files if f.sha256})
        return repo

    def token_ok(self, token: str) -> bool:
        return hashlib.sha256(token.encode()).hexdigest() in self.token_hashes

    def sign(self, path: str, expires: int) -> str:
        return hmac.new(self.key, f"{path}\n{expires}".encode(), "sha256").hexdigest()[:32]

    def take_fault(self, path: str) -> int | None:
        """Bytes after which to cut this download, if a fault matches (used up once)."""
        with self._lock:
            for f in self.faults:
                if f["match"] in path and f["times"] > 0:
                    f["times"] -= 1
                    return int(f["cut_after"])
        return None

    def log(self, rec: dict[str, Any]) -> None:
        if self._log is not None:
            self._log.write(json.dumps(rec, sort_keys=True) + "\n")


class _Cut(Exception):
    pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "specdec-lab-hub"
    hub: Hub
    cdn_port: int
    role: str  # "hub" or "cdn"

    # -- plumbing -------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        pass  # the request log is Hub.log (no query strings, no headers)

    def _token(self) -> tuple[bool, bool]:
        """(a token was sent, it is one the lab issued)."""
        auth = self.headers.get("Authorization", "")
        if not auth.lower().startswith("bearer "):
            return False, False
        return True, self.hub.token_ok(auth[7:].strip())

    def _send(self, status: int, headers: dict[str, str], body: bytes = b"",
              kind: str = "api", **count: Any) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", headers.get("Content-Length", str(len(body))))
        self.end_headers()
        sent = 0
        if self.command != "HEAD" and body:
            self.hub.limiter.take(len(body))
            self.wfile.write(body)
            sent = len(body)
        self._count(kind, status, sent, **count)

    def _count(self, kind: str, status: int, sent: int, file: str | None = None,
               **count: Any) -> None:
        client = self.client_address[0]
        path = urlsplit(self.path).path
        if path.startswith("/_lab/"):
            return  # the control node asking: not the Hub's traffic
        self.hub.counters.add(kind, client, status, sent, self._token()[0], path=file or path,
                              **count)
        self.hub.log({"t": round(time.time(), 3), "client": client, "method": self.command,
                      "path": path, "status": status, "bytes": sent, "kind": kind,
                      "token": self._token()[0], "range": count.get("range_start")})

    def _json(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, {"Content-Type": "application/json", **(headers or {})},
                   json.dumps(doc).encode())

    def _error(self, status: int, code: str | None, message: str,
               extra: dict[str, str] | None = None) -> None:
        h = {"X-Error-Message": message, **(extra or {})}
        if code:
            h["X-Error-Code"] = code
        self._json(status, {"error": message}, h)

    def _range(self, size: int) -> tuple[int, int] | None:
        """The requested byte range (``bytes=A-[B]``), or None for the whole."""
        spec = self.headers.get("Range", "")
        if not spec.startswith("bytes=") or "," in spec:
            return None
        a, _, b = spec[6:].partition("-")
        try:
            start = int(a)
            end = int(b) + 1 if b else size
        except ValueError:
            return None
        return (start, min(end, size)) if start < size else (size, size)

    def _body(self, f: RepoFile, kind: str, headers: dict[str, str], revision: str,
              size: int) -> None:
        """A file's bytes (206 for a range), paced and counted; a fault may cut it."""
        rng = self._range(f.size)
        start, end = rng if rng is not None else (0, f.size)
        status = 206 if rng is not None else 200
        h = {**headers, "Accept-Ranges": "bytes", "Content-Length": str(end - start),
             "Content-Type": "application/octet-stream"}
        if rng is not None:
            h["Content-Range"] = f"bytes {start}-{end - 1}/{f.size}"
        self.send_response(status)
        for k, v in h.items():
            self.send_header(k, v)
        self.end_headers()
        sent = 0
        cut = self.hub.take_fault(f.path) if self.command == "GET" else None
        try:
            if self.command == "GET":
                for chunk in f.chunks(start, end):
                    for i in range(0, len(chunk), CHUNK):
                        piece = chunk[i:i + CHUNK]
                        if cut is not None and sent + len(piece) > cut:
                            piece = piece[:cut - sent]
                            self.wfile.write(piece)
                            sent += len(piece)
                            raise _Cut
                        self.hub.limiter.take(len(piece))
                        self.wfile.write(piece)
                        sent += len(piece)
        except _Cut:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self._count(kind, status, sent, file=f.path, revision=revision, size=size,
                        range_start=start if rng is not None else None)

    # -- routes ---------------------------------------------------------------------------

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        path = unquote(url.path)
        if path == "/_lab/counters":
            if self._control():
                self._json(200, self.hub.counters.snapshot())
            return
        sent, ok = self._token()
        if sent and not ok:
            self._error(401, None, "Invalid credentials in Authorization header")
            return
        if self.role == "cdn":
            self._cdn(path, parse_qs(url.query))
            return
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            self._api(parts[2] + "/" + parts[3], parts[4:], ok)
        elif len(parts) >= 5 and parts[2] == "resolve":
            self._resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]), ok)
        else:
            self._error(404, None, "Not Found")

    def do_POST(self) -> None:  # noqa: N802
        if not self._control():
            return
        n = int(self.headers.get("Content-Length") or 0)
        doc = json.loads(self.rfile.read(n) or b"{}")
        path = urlsplit(self.path).path
        if path == "/_lab/reset":
            self.hub.counters.reset()
        elif path == "/_lab/fault":
            with self.hub._lock:
                self.hub.faults.append({"match": str(doc["match"]), "times": int(
                    doc.get("times", 1)), "cut_after": int(doc["cut_after"])})
        elif path == "/_lab/config":
            mbps = doc.get("wan_mbps")
            self.hub.limiter.rate = float(mbps) * 1e6 / 8 if mbps else None
        else:
            self._error(404, None, "Not Found")
            return
        self._json(200, {"ok": True})

    def _control(self) -> bool:
        if self.client_address[0] in self.hub.control:
            return True
        self._error(403, None, "the lab's control endpoints answer the control node only")
        return False

    def _repo_or_error(self, repo_id: str, token_ok: bool) -> HubRepo | None:
        repo = self.hub.repo(repo_id)
        if repo is None:
            # The Hub: 401 without a token (no leak of private repos' existence), else 404.
            self._error(404 if token_ok else 401, "RepoNotFound", "Repository not found")
        return repo

    def _rev_ok(self, repo: HubRepo, rev: str) -> bool:
        if rev in ("main", repo.revision):
            return True
        self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return False

    def _api(self, repo_id: str, rest: list[str], token_ok: bool) -> None:
        repo = self._repo_or_error(repo_id, token_ok)
        if repo is None:
            return
        if not rest or rest[0] == "revision" and len(rest) >= 2:
            if rest and not self._rev_ok(repo, "/".join(rest[1:])):
                return
            self._json(200, repo.info())
        elif rest[0] == "tree" and len(rest) >= 2:
            if not self._rev_ok(repo, rest[1]):
                return
            prefix = "/".join(rest[2:])
            entries = [f.tree_entry() for f in repo.files
                       if not prefix or f.path.startswith(prefix.rstrip("/") + "/")]
            self._json(200, entries)
        else:
            self._error(404, None, "Not Found")

    def _resolve(self, repo_id: str, rev: str, file: str, token_ok: bool) -> None:
        repo = self._repo_or_error(repo_id, token_ok)
        if repo is None or not self._rev_ok(repo, rev):
            return
        commit = {"X-Repo-Commit": repo.revision}
        if repo.gated and not token_ok:
            self._error(401, "GatedRepo", f"Access to model {repo.id} is restricted. You must "
                        "have access to it and be authenticated to access it. Please log in.",
                        commit)
            return
        f = repo.file(file)
        if f is None:
            self._error(404, "EntryNotFound", f"{file} does not exist on \"{rev}\"", commit)
            return
        if f.lfs:
            assert f.sha256 is not None
            cdn_path = f"/repos/{f.sha256[:2]}/{f.sha256[2:4]}/{f.sha256}"
            expires = int(time.time()) + URL_TTL
            here = self.connection.getsockname()[0]
            scheme = "https" if isinstance(self.connection, ssl.SSLSocket) else "http"
            location = (f"{scheme}://{here}:{self.cdn_port}{cdn_path}?Expires={expires}"
                        f"&Signature={self.hub.sign(cdn_path, expires)}&Key-Pair-Id=lab")
            self._send(302, {**commit, "Location": location, "ETag": f'"{f.oid}"',
                             "X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size)},
                       kind="resolve")
            return
        self._body(f, "resolve", {**commit, "ETag": f'"{f.oid}"'}, f"{repo.id}@{repo.revision}",
                   repo.size)

    def _cdn(self, path: str, query: dict[str, list[str]]) -> None:
        expires = int((query.get("Expires") or ["0"])[0] or 0)
        sig = (query.get("Signature") or [""])[0]
        if expires < time.time() or not hmac.compare_digest(sig, self.hub.sign(path, expires)):
            self._send(403, {"Content-Type": "application/xml"},
                       b"<Error><Code>AccessDenied</Code></Error>", kind="cdn")
            return
        sha = path.rsplit("/", 1)[-1]
        repo = self.hub.lfs.get(sha)
        f = next((x for x in repo.files if x.sha256 == sha), None) if repo else None
        if repo is not None and f is not None:
            self._body(f, "cdn", {"ETag": f'"{sha}"'}, f"{repo.id}@{repo.revision}", repo.size)
            return
        self._send(404, {"Content-Type": "application/xml"},
                   b"<Error><Code>NoSuchKey</Code></Error>", kind="cdn")


def _handler(hub: Hub, role: str, cdn_port: int) -> type[Handler]:
    return type(f"{role.title()}Handler", (Handler,), {"hub": hub, "role": role,
                                                       "cdn_port": cdn_port})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    tls: ssl.SSLContext | None = None  # HTTPS, as the Hub and its CDN serve

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        if self.tls is None:
            return sock, addr
        # the handshake in the request's own thread (its first read), not in accept's
        return self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr


def serve(hub: Hub, binds: list[str], port: int, cdn_port: int,
          tls: ssl.SSLContext | None = None) -> list[_Server]:
    """Start both ports on every address (threads), HTTPS with ``tls``; returns the servers."""
    servers = []
    for addr in binds:
        hub.control.add(addr)
        for role, p in (("hub", port), ("cdn", cdn_port)):
            srv = _Server((addr, p), _handler(hub, role, cdn_port))
            srv.tls = tls
            threading.Thread(target=srv.serve_forever, daemon=True,
                             name=f"hub-{role}-{addr}").start()
            servers.append(srv)
    return servers


def _token_hashes(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m specdec_lab.hub", description=__doc__)
    p.add_argument("--bind", action="append", required=True, metavar="ADDR")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cdn-port", type=int, required=True)
    p.add_argument("--tokens", type=Path, required=True,
                   help="file of sha256 hex digests of the tokens the Hub accepts")
    p.add_argument("--scale", type=float, default=DEFAULT_SCALE)
    p.add_argument("--log", type=Path)
    p.add_argument("--state-dir", type=Path, help="where the lab keeps this Hub's files")
    p.add_argument("--cert", type=Path, help="HTTPS: the certificate (PEM; with --key)")
    p.add_argument("--key", type=Path)
    args = p.parse_args(argv)
    hub = Hub(_token_hashes(args.tokens), args.scale, args.log)
    tls = None
    if args.cert:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(args.cert, args.key)
    serve(hub, args.bind, args.port, args.cdn_port, tls)
    print(f"specdec lab hub: {', '.join(args.bind)} ports {args.port}/{args.cdn_port}",
          flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
