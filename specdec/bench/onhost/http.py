"""HTTP/1.1 over asyncio streams: the on-host client's transport (the control node's is httpx,
`specdec.bench.transport`)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from urllib.parse import urlsplit

from .errors import StreamError


class Http:
    """Keep-alive connections reused as httpx's pool reuses them (a burst of new connections
    would meet a small listen backlog); a reused connection the server closed meanwhile is
    replaced once, as httpx does."""

    def __init__(self, base, connect_timeout, api_key=None, ssl_context=None):
        parts = urlsplit(base)
        self.auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        # https: the given context (a CA file's), else the system's trust
        self.ssl = (ssl_context or True) if parts.scheme == "https" else None
        self.netloc = parts.netloc
        self.connect_timeout = connect_timeout
        self.idle = []

    async def _connect(self, fresh):
        while self.idle and not fresh:
            reader, writer = self.idle.pop()
            if not reader.at_eof() and not writer.is_closing():
                return reader, writer, True
            writer.close()
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=self.ssl),
            self.connect_timeout)
        writer.transport.set_write_buffer_limits(0)  # drain() = handed to the socket
        return reader, writer, False

    async def request(self, method, path, body=None):
        """Send the request, read the head: (reader, writer, status, headers, t_on_wire)."""
        data = json.dumps(body).encode() if body is not None else b""
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.netloc}\r\n"
                f"User-Agent: specdec-bench\r\nAccept: */*\r\n{self.auth}")
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        for attempt in (0, 1):
            reader, writer, reused = await self._connect(fresh=attempt == 1)
            try:
                writer.write(head.encode() + b"\r\n" + data)
                await writer.drain()
                sent = time.perf_counter()
                status, headers = await self.head(reader)
                return reader, writer, status, headers, sent
            except (OSError, StreamError, asyncio.IncompleteReadError):
                writer.close()
                if not reused:
                    raise
        raise StreamError("connection", "unreachable")

    def release(self, reader, writer, headers):
        if headers.get("connection", "").lower() == "close" or reader.at_eof():
            writer.close()
        else:
            self.idle.append((reader, writer))

    def close(self):
        for _, writer in self.idle:
            writer.close()
        self.idle = []

    @staticmethod
    async def head(reader):
        line = await reader.readline()
        m = re.match(rb"HTTP/1\.[01] (\d{3})", line)
        if not m:
            raise StreamError("connection", f"not an HTTP response: {line[:40]!r}")
        headers = {}
        while True:
            h = await reader.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            k, _, v = h.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        return int(m.group(1)), headers

    @staticmethod
    async def body(reader, headers):
        """The body in pieces as they arrive (chunked, sized or until close)."""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass
                    return
                data = await reader.readexactly(size)
                await reader.readexactly(2)
                yield data
        elif "content-length" in headers:
            left = int(headers["content-length"])
            while left > 0:
                data = await reader.read(min(left, 65536))
                if not data:
                    raise StreamError("connection", "connection closed mid-body")
                left -= len(data)
                yield data
        else:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                yield data

    async def get(self, path, timeout=30.0):
        async def go():
            reader, writer, status, headers, _ = await self.request("GET", path)
            try:
                parts = [d async for d in self.body(reader, headers)]
            except BaseException:
                writer.close()
                raise
            self.release(reader, writer, headers)
            return status, headers, b"".join(parts).decode("utf-8", "replace")
        return await asyncio.wait_for(go(), timeout)
