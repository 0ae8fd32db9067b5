"""Run test streams side by side, each line prefixed with its stream's name; exit non-zero
when any stream failed (every stream runs to its end, so each one's failures are shown).

    python3 tests/streams.py lab='pytest tests/e2e …' rest='make unit && pytest …'

`make test` runs its two streams with it: the machines it targets have two cores, and each
stream is mostly one busy process (the lab's control node and emulated hosts; the unit suite,
then the real engine). Each command runs under ``sh -c`` from the current directory.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import IO

_OUT = threading.Lock()


def _pump(name: str, stream: IO[bytes]) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        with _OUT:
            sys.stdout.write(f"[{name}] {line}\n")
            sys.stdout.flush()


def main(argv: list[str]) -> int:
    streams = [a.partition("=") for a in argv]
    if not streams or any(not name or not sep or not cmd for name, sep, cmd in streams):
        print("usage: streams.py NAME='command' [NAME='command' ...]", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    procs, pumps = [], []
    for name, _, cmd in streams:
        p = subprocess.Popen(["sh", "-c", cmd], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        assert p.stdout is not None
        t = threading.Thread(target=_pump, args=(name, p.stdout), daemon=True)
        t.start()
        procs.append((name, p))
        pumps.append(t)
    failed = []
    for (name, p), t in zip(procs, pumps, strict=True):
        rc = p.wait()
        t.join()
        took = time.monotonic() - t0
        print(f"[{name}] exit {rc} after {took / 60:.1f} min", flush=True)
        if rc != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
