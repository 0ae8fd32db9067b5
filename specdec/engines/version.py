"""Engine versions as comparable values (a PEP 440 subset; no third-party imports, because the
engine emulator runs this inside the lab images).

``0.9.2``, ``0.10.1.1``, ``v0.11.0``, ``1.2.0rc6``, ``0.11.0+582e4e37.nv25.11.cu130`` (NGC builds
carry a local part; only the public part counts, as vLLM's own version checks do).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

__all__ = ["Version", "version_in_tag"]

_PRE = {"a": 0, "b": 1, "rc": 2}
_VERSION = re.compile(
    r"v?(?P<release>\d+(?:\.\d+){0,3})"
    r"(?:[.-]?(?P<pre>a|b|rc)(?P<pre_n>\d+))?"
    r"(?:\.post(?P<post>\d+))?"
    r"(?:\.dev(?P<dev>\d+))?"
    r"(?:\+(?P<local>[A-Za-z0-9.]+))?"
)
# A version at the start of an image tag: 0.9.2-r36.4-cu128-24.04, v0.11.0, 1.2.0rc6,
# 0.10.1.1-cuda12.8 (NGC's 25.11-py3 names a container release, not an engine version).
_TAG = re.compile(r"v?\d+\.\d+\.\d+(?:\.\d+)?(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?=$|[-_+])")


@total_ordering
@dataclass(frozen=True)
class Version:
    release: tuple[int, ...]
    pre: tuple[int, int] | None = None  # (a=0|b=1|rc=2, n); None = final
    post: int = 0
    dev: int | None = None

    @classmethod
    def parse(cls, text: str) -> Version:
        """``ValueError`` with a one-line message when ``text`` is not a version."""
        m = _VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"{text!r} is not a version (expected e.g. 0.9.2 or 1.2.0rc6)")
        release = tuple(int(x) for x in m.group("release").split("."))
        pre = (_PRE[m.group("pre")], int(m.group("pre_n"))) if m.group("pre") else None
        dev = int(m.group("dev")) if m.group("dev") is not None else None
        return cls(release, pre, int(m.group("post") or 0), dev)

    def _key(self) -> tuple[object, ...]:
        rel = self.release + (0,) * (4 - len(self.release))
        # dev < pre-release < final < post (PEP 440 order, enough for engine tags)
        pre = self.pre if self.pre is not None else (3, 0)
        dev = self.dev if self.dev is not None else 1 << 30
        if self.dev is not None and self.pre is None and not self.post:
            pre = (-1, 0)
        return (rel, pre, self.post, dev)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    @property
    def is_prerelease(self) -> bool:
        return self.pre is not None or self.dev is not None

    def __repr__(self) -> str:
        return f"Version({str(self)!r})"

    def __str__(self) -> str:
        text = ".".join(str(x) for x in self.release)
        if self.pre is not None:
            text += ("a", "b", "rc")[self.pre[0]] + str(self.pre[1])
        if self.post:
            text += f".post{self.post}"
        if self.dev is not None:
            text += f".dev{self.dev}"
        return text


def version_in_tag(tag: str) -> Version | None:
    """The engine version an image tag states at its start, else None."""
    m = _TAG.match(tag)
    return Version.parse(m.group(0)) if m else None
