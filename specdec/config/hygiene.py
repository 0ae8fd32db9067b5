"""Input hygiene in one place: every value that can reach a unit file, YAML, a shell command or
an error message passes a check here first (host data in `specdec.plan.hostdata`, host names in
`specdec.plan.hostdata` / the deploy's prepare / `specdec rollout`, tokens in
`specdec.config.hftoken`).

A failure is a `ConfigError` naming host, key and the value as `show` renders it: repr'd (so
one line), token-shaped strings redacted, then cut to `SHOW_MAX` characters.
"""

from __future__ import annotations

import ipaddress
import math
import re
import unicodedata
from collections.abc import Collection, Mapping, Sequence, Sized
from typing import Any

from specdec.errors import ConfigError, redact

__all__ = [
    "LINE_BREAKS",
    "split_reference",
    "MAX_ARG",
    "MAX_ARGS",
    "MAX_ENV",
    "MAX_ENV_VALUE",
    "MAX_PATH",
    "MAX_TEXT",
    "bad_char",
    "check_address",
    "check_cidr",
    "check_engine_args",
    "check_env_name",
    "check_env_reserved",
    "check_host_name",
    "check_image",
    "check_int",
    "check_ip",
    "check_net_host",
    "check_number",
    "check_repo_id",
    "check_size",
    "check_text",
    "fail",
    "flag_values",
    "hide_userinfo",
    "is_loopback",
    "managed_flag",
    "show",
    "unsafe_flag",
]

SHOW_MAX = 60  # characters of a bad value shown in an error
MAX_TEXT = 128  # short one-line values: device id, tokenizer, user name
MAX_PATH = 4096  # PATH_MAX
MAX_ARG = 1024  # one engine argument
MAX_ARGS = 64
MAX_ENV = 64
MAX_ENV_VALUE = 1024
MAX_IMAGE = 512  # whole reference; the name part is capped at 255 below

# Every character `str.splitlines` breaks on (Python docs, "str.splitlines").
LINE_BREAKS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
# Control, format (bidi, zero-width), surrogate, private-use, unassigned, line/paragraph sep.
_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
# RFC 3986 section 3.2.1: the userinfo of a URL's authority ("user:password@"), which a unit's
# Environment= or an engine argument would show to anyone who can read the unit or ps. Found by
# a linear scan (a regex over a 2 MiB value would backtrack for minutes).
_AUTHORITY_END = frozenset("/?#@'\"") | frozenset(" \t\r\n\\")


def hide_userinfo(text: str) -> str:
    """``text`` with the userinfo of every ``scheme://user:password@`` replaced."""
    out, i = [], 0
    while (k := text.find("://", i)) != -1:
        j = k + 3
        while j < len(text) and text[j] not in _AUTHORITY_END:
            j += 1
        if j < len(text) and text[j] == "@" and j > k + 3:
            out.append(text[i:k + 3] + "<redacted>")
            i = j
        else:
            out.append(text[i:j])
            i = j
    out.append(text[i:])
    return "".join(out)


def show(value: Any) -> str:
    """A value for an error message: repr (one line), redacted (tokens, a URL's user and
    password), then truncated."""
    text = hide_userinfo(redact(repr(value)))
    if len(text) <= SHOW_MAX:
        return text
    size = f" ({len(value)} chars)" if isinstance(value, str) else ""
    return text[:SHOW_MAX] + "…" + size


def fail(host: str | None, key: str, value: Any, why: str) -> ConfigError:
    return ConfigError(f"{key}={show(value)}: {why}", host=host)


def bad_char(text: str) -> str | None:
    """``U+XXXX`` of the first line break or control/format character in ``text``, or None."""
    for c in text:
        if c in LINE_BREAKS or unicodedata.category(c) in _BAD_CATEGORIES:
            return f"U+{ord(c):04X}"
    return None


def check_text(host: str | None, key: str, value: Any, max_len: int = MAX_TEXT, *,
               allow_empty: bool = False, allow_spaces: bool = False) -> str:
    """A one-line string: no line break or control character, at most ``max_len`` long,
    non-empty and without surrounding whitespace unless allowed, not token-shaped."""
    if not isinstance(value, str):
        raise fail(host, key, value, "must be a string")
    if not value.strip() and not allow_empty:
        raise fail(host, key, value, "must be a non-empty string")
    if len(value) > max_len:
        raise fail(host, key, value, f"is {len(value)} characters long (at most {max_len})")
    if (c := bad_char(value)) is not None:
        raise fail(host, key, value, f"contains a line break or control character ({c})")
    if not allow_spaces and value != value.strip():
        raise fail(host, key, value, "must not have surrounding whitespace")
    if redact(value) != value:
        raise fail(host, key, value, "looks like a Hugging Face token; secrets do not belong in "
                   "host data (the token goes to specdec_hf_token_file or $HF_TOKEN)")
    if hide_userinfo(value) != value:
        raise fail(host, key, value, "a URL with credentials (user:password@); secrets do not "
                   "belong in host data or a unit file")
    return value



# -- host names ------------------------------------------------------------------------------

_CONNECTOR = re.compile(r"@[a-z][a-z0-9_]*/")  # pyinfra's "@ssh/", "@fake/", "@docker/", ...
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def check_host_name(name: Any) -> str:
    """An inventory host name: 1-63 of ``[A-Za-z0-9._-]``, starting with a letter or digit,
    after an optional pyinfra ``@connector/`` prefix (or ``@local``). pyinfra itself accepts
    any string; this is what may appear in a unit comment, a file name and a report."""
    if name == "@local":
        return name
    rest = name
    if isinstance(name, str) and (m := _CONNECTOR.match(name)):
        rest = name[m.end():]
    if not isinstance(rest, str) or not _HOST_NAME.fullmatch(rest):
        raise ConfigError(
            f"host name {show(name)}: not a valid inventory host name (1-63 letters, digits, "
            "'.', '_' or '-', starting with a letter or digit; optional @connector/ prefix)")
    return name


# -- addresses -------------------------------------------------------------------------------

# RFC 1123 section 2.1 host names: dot-separated labels of letters, digits and '-', 1-63 each,
# not starting or ending with '-', 253 in all; a name whose labels are all digits reads as an
# IPv4 address and is refused (RFC 3696 section 2).
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)
ADDRESS_RULE = ("must be an IP address or a host name (letters, digits, '-' and '.'; no port, "
                "no comma, no brackets)")


def check_ip(host: str | None, key: str, value: Any) -> str:
    """An IPv4 or IPv6 address, as written (no brackets, no port, no zone)."""
    check_text(host, key, value, 64)
    try:
        if "%" in value:
            raise ValueError(value)
        ipaddress.ip_address(value)
    except ValueError:
        raise fail(host, key, value, "must be an IP address (IPv4 or IPv6, no port)") from None
    return value


def check_address(host: str | None, key: str, value: Any) -> str:
    """An IP address or a DNS host name: what goes into a URL's host part, a bind address or
    an etcd URL list (so never a comma, a port, brackets or a scheme)."""
    check_text(host, key, value, 253)
    if "%" in value:  # an IPv6 zone: not in a URL or a unit without escaping (RFC 6874)
        raise fail(host, key, value, ADDRESS_RULE)
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    labels = value.removesuffix(".").split(".")
    if not all(_LABEL.fullmatch(p) for p in labels) or all(p.isdigit() for p in labels):
        raise fail(host, key, value, ADDRESS_RULE)
    return value


def check_cidr(host: str | None, key: str, value: Any) -> str:
    """A network in CIDR notation (``10.0.0.0/8``, ``fd00::/8``; a bare address is a /32 or
    /128), without host bits; returned normalised."""
    check_text(host, key, value, 64)
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        why = "has host bits set" if "host bits" in str(exc) else "is not a network in CIDR " \
            "notation (e.g. 10.0.0.0/8)"
        raise fail(host, key, value, why) from None
    return str(net)


# -- Hugging Face repo ids -------------------------------------------------------------------

# huggingface_hub 2.4.0, huggingface_hub/utils/_validators.py, REPO_ID_REGEX and
# validate_repo_id: "[namespace/]name", each 1-96 of ASCII [A-Za-z0-9_.-] starting and ending
# with a word character (the regex's \b), no "--" or "..", not ending in ".git".
_REPO_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_REPO_ID = re.compile(rf"(?:{_REPO_PART}/)?{_REPO_PART}")
MAX_REPO_ID = 96 + 1 + 96


def check_repo_id(host: str | None, key: str, value: Any) -> str:
    check_text(host, key, value, MAX_REPO_ID)
    if (not _REPO_ID.fullmatch(value) or "--" in value or ".." in value
            or value.endswith(".git")):
        raise fail(host, key, value, "not a Hugging Face repo id ([namespace/]name: letters, "
                   "digits, '-', '_', '.', each part at most 96, no '--' or '..')")
    return value


# -- image references ------------------------------------------------------------------------

# distribution/reference regexp.go (github.com/distribution/reference, v0.6.0): reference :=
# name [":" tag] ["@" digest]; a domain component and a path component start with a letter
# or digit (so "-eX/vllm:1" is not a reference, and `docker run` cannot read it as an option).
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = (rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[(?:[a-fA-F0-9:]+)\])"
           r"(?::[0-9]+)?")
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?",
                        re.ASCII)
_PATH_ONLY = re.compile(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*", re.ASCII)


def split_reference(text: str) -> tuple[str | None, str, str | None, str | None] | None:
    """(registry, path, tag, digest) of a reference, or None when it is not one. The first
    component is the registry only when it has a '.' or ':', is "localhost" or an IPv6 literal
    (distribution/reference normalize.go splitDockerDomain); otherwise it is a path component
    and so lower case."""
    m = _REFERENCE.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        return None
    first, sep, rest = m.group("name").partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        return first, rest, m.group("tag"), m.group("digest")
    if not _PATH_ONLY.fullmatch(m.group("name")):
        return None
    return None, m.group("name"), m.group("tag"), m.group("digest")
NAME_TOTAL_LENGTH_MAX = 255  # distribution/reference reference.go
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")


def check_image(host: str | None, key: str, value: Any) -> str:
    """A pinned image reference: ``name:tag``, ``name:tag@sha256:…`` or ``name@sha256:…``
    (Docker's reference grammar; never a moving ``latest`` tag)."""
    check_text(host, key, value, MAX_IMAGE)
    m = _REFERENCE.fullmatch(value)
    if not m or split_reference(value) is None:
        raise fail(host, key, value, "not a valid image reference ([registry[:port]/]path"
                   "[:tag][@digest]; lowercase path components starting with a letter or digit)")
    if len(m.group("name")) > NAME_TOTAL_LENGTH_MAX:
        raise fail(host, key, value, f"image name is longer than {NAME_TOTAL_LENGTH_MAX}")
    tag, digest = m.group("tag") or "", m.group("digest")
    if digest is not None and not _SHA256.fullmatch(digest):
        raise fail(host, key, value, "pin a sha256 digest (sha256: and 64 lowercase hex digits)")
    if tag == "latest" or tag.startswith(("latest-", "latest_")):
        raise fail(host, key, value, f"':{tag}' is a moving tag, not pinned; use a version tag "
                   "or @sha256 digest")
    if not tag and digest is None:
        raise fail(host, key, value, "image is not pinned; use repo:tag or repo@sha256:<digest>")
    return value


# -- network addresses and URLs --------------------------------------------------------------

MAX_URL = 512
# host[:port]: a DNS name, an IPv4 address or a bracketed IPv6 literal
_NET_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])")
_HOST_PORT = re.compile(rf"(?P<host>{_NET_HOST.pattern})(?::(?P<port>[0-9]{{1,5}}))?")
_URL = re.compile(r"(?P<scheme>https?)://(?P<hostport>[^/?#@]+)(?P<path>/[^?#]*)?")
# RFC 3986 section 3.3: a path is segments of pchar = unreserved / pct-encoded / sub-delims /
# ":" / "@"; of the sub-delims, ";", "$" and "'" are left out (nginx reads ";" as the end of a
# directive, "$" as a variable, quotes as quoting), and nothing else (whitespace, '"', braces,
# backslash) is a pchar anyway: a path can never become nginx directives or a YAML token.
URL_PATH = re.compile(r"(?:/(?:[A-Za-z0-9._~!&()*+,=:@-]|%[0-9A-Fa-f]{2})*)+", re.ASCII)
URL_PATH_RULE = ("the URL's path may hold only letters, digits, '/', '-._~!&()*+,=:@' and "
                 "%XX escapes (RFC 3986 without ';', '$' or quotes)")


def is_loopback(name: str) -> bool:
    """``localhost``, 127.0.0.0/8 or ``[::1]``: this host itself."""
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def check_host_port(host: str | None, key: str, value: Any, *, port: bool = True) -> str:
    """``name[:port]`` (a DNS name, IPv4 address or [IPv6] literal; port 1-65535)."""
    check_text(host, key, value, 255)
    m = _HOST_PORT.fullmatch(value)
    if m is None or (m.group("port") and (not port or not 0 < int(m.group("port")) < 65536)) \
            or not check_net_host(m.group("host")):
        raise fail(host, key, value, "not a host name or address" + ("[:port]" if port else ""))
    return value


def check_url(host: str | None, key: str, value: Any) -> str:
    """An ``https://`` URL of a server (``http://`` only to this host's own loopback): no
    credentials (``user:pass@``), query or fragment; the path, if any, in `URL_PATH` (no
    trailing slash)."""
    check_text(host, key, value, MAX_URL)
    m = _URL.fullmatch(value)
    if "@" in value.split("//", 1)[-1].split("/", 1)[0]:
        raise fail(host, key, "<redacted>", "credentials do not belong in a URL in host data")
    hp = _HOST_PORT.fullmatch(m.group("hostport")) if m is not None else None
    if m is None or hp is None or not check_net_host(hp.group("host")):
        raise fail(host, key, value, "not an https:// URL (https://host[:port][/path], no "
                   "query)")
    port = hp.group("port")
    if port and not 0 < int(port) < 65536:
        raise fail(host, key, value, f"port {port} is not in 1..65535")
    path = m.group("path") or ""
    if path and not URL_PATH.fullmatch(path):
        raise fail(host, key, value, URL_PATH_RULE)
    if path.endswith("/"):
        raise fail(host, key, value, "drop the trailing '/'")
    if m.group("scheme") == "http" and not is_loopback(hp.group("host")):
        raise fail(host, key, value, "plain http:// only to this host's own loopback "
                   "(127.0.0.1, [::1], localhost): on a network anyone can read and change "
                   "what it carries (the token, the files); use https://")
    return value


# -- numbers ---------------------------------------------------------------------------------


def check_int(host: str | None, key: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise fail(host, key, value, f"must be an integer in {lo}..{hi}")
    return value


def check_number(host: str | None, key: str, value: Any, lo: float, hi: float, *,
                 lo_open: bool = True, hi_open: bool = False) -> float:
    """A finite number in the range (``lo_open``/``hi_open``: exclusive ends)."""
    lo_s, hi_s = ("(" if lo_open else "[") + f"{lo:g}", f"{hi:g}" + (")" if hi_open else "]")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(host, key, value, f"must be a number in {lo_s}, {hi_s}")
    v = float(value)
    ok = math.isfinite(v) and (lo < v if lo_open else lo <= v) and (v < hi if hi_open
                                                                       else v <= hi)
    if not ok:
        raise fail(host, key, value, f"must be a finite number in {lo_s}, {hi_s}")
    return v


# -- engine arguments and environment --------------------------------------------------------

# Which flags each engine manages is the engine's (`specdec.engines.base.Engine.managed_flags`).
_SECRET_FLAGS = ("--hf-token", "--api-key", "--token")


def _normal(flag: str) -> str:
    return flag.replace("_", "-")


def managed_flag(arg: str, managed: Mapping[str, str],
                 abbreviated: bool) -> tuple[str, str] | None:
    """``(flag, why)`` when ``arg`` sets a flag of ``managed`` (flag -> what to use instead) or
    a secret flag, in any spelling.

    vLLM's FlexibleArgumentParser (vllm v0.9.2, the Jetson images' release,
    vllm/utils/__init__.py, parse_args; the same in v0.11) reads ``--a_b`` as ``--a-b``,
    ``--k.x=v`` as setting ``--k``, and ``--config FILE`` as more arguments; argparse
    (allow_abbrev, left on; ``abbreviated``) takes an unambiguous prefix such as
    ``--max-model`` for ``--max-model-len``. trtllm-serve (click) takes exact names and
    ``--name=value``; the other spellings are refused there as well.
    """
    if not arg.startswith("--") or arg == "--":
        return None
    key = _normal(arg.split("=", 1)[0].split(".", 1)[0])
    table = managed
    prefixes = abbreviated and len(key) > 3
    for flag, why in table.items():
        if key == _normal(flag) or (prefixes and _normal(flag).startswith(key)):
            return flag, f"{flag} is managed by specdec ({why})"
    for flag in _SECRET_FLAGS:
        if key == flag or (prefixes and flag.startswith(key) and len(key) > 4):
            return flag, f"{flag} takes a secret; secrets do not belong on the command line"
    return None


def check_engine_args(host: str | None, key: str, value: Any, managed: Mapping[str, str],
                      abbreviated: bool, unsafe: Mapping[str, str] | None = None
                      ) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise fail(host, key, value, "must be a list of strings")
    if len(value) > MAX_ARGS:
        raise fail(host, key, value, f"has {len(value)} items (at most {MAX_ARGS})")
    for i, arg in enumerate(value):
        item = f"{key}[{i}]"
        check_text(host, item, arg, MAX_ARG, allow_spaces=True)
        hit = managed_flag(arg, managed, abbreviated) or unsafe_flag(arg, unsafe or {},
                                                                     abbreviated)
        if hit is not None:
            raise fail(host, item, arg, hit[1])
    return tuple(value)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Set by specdec (HF_HOME, HF_HUB_OFFLINE, HF_TOKEN_PATH, TRANSFORMERS_CACHE, HOME,
# XDG_CACHE_HOME; an engine's own through `Engine.reserved_env`; tests/unit/test_reserved_env.py
# checks every unit), or moving where code, weights, certificates and the token come from:
# the Hub's variables (HF_ENDPOINT, HUGGING_FACE_HUB_TOKEN, ...), the dynamic loader
# (ld.so(8): LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, ...; glibc's GLIBC_TUNABLES, GCONV_PATH),
# the interpreters' hooks (python(1): every PYTHON* variable; bash(1): BASH_ENV, ENV; perl, node,
# ruby), the TLS trust store (OpenSSL's SSL_CERT_FILE/SSL_CERT_DIR and OPENSSL_CONF, which loads
# engines; requests' REQUESTS_CA_BUNDLE, curl's CURL_CA_BUNDLE), systemd's per-service
# directories, and vLLM's development mode (unauthenticated /sleep, /collective_rpc: vLLM
# 0.9.2 vllm/entrypoints/openai/api_server.py:912, "SECURITY WARNING" in 0.31.0).
RESERVED_ENV_PREFIXES = ("HF_", "HUGGING_FACE_", "HUGGINGFACE_", "TRANSFORMERS_", "LD_",
                         "PYTHON", "SSL_", "OPENSSL_", "PERL5", "DYLD_", "XDG_")
RESERVED_ENV = ("PATH", "HOME", "BASH_ENV", "ENV", "SHELL", "IFS", "GLIBC_TUNABLES",
                "GCONV_PATH", "LOCPATH", "NODE_OPTIONS", "NODE_PATH", "RUBYOPT", "RUBYLIB",
                "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "CREDENTIALS_DIRECTORY",
                "RUNTIME_DIRECTORY", "STATE_DIRECTORY", "CACHE_DIRECTORY", "LOGS_DIRECTORY",
                "CONFIGURATION_DIRECTORY", "NOTIFY_SOCKET", "VLLM_SERVER_DEV_MODE")


def check_env_name(host: str | None, key: str, name: Any) -> str:
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        raise ConfigError(f"{key}: name {show(name)} is not a valid environment variable name",
                          host=host)
    return name


def check_env_reserved(host: str | None, key: str, name: str, value: Any,
                       engines_env: Collection[str] = ()) -> str:
    """``name`` unless specdec manages it, or an engine's units set it (``engines_env``; an
    entry ending in ``_`` reserves every name it starts)."""
    upper = name.upper()
    engine_prefixes = tuple(e for e in engines_env if e.endswith("_"))
    if upper in RESERVED_ENV or upper in engines_env or upper.startswith(RESERVED_ENV_PREFIXES) \
            or (engine_prefixes and upper.startswith(engine_prefixes)):
        raise fail(host, f"{key}.{name}", value, f"{name} is reserved (managed by specdec, or "
                   "it changes where the engine loads code, weights or the token from)")
    return name


def check_size(host: str | None, key: str, value: Sized, cap: int) -> None:
    if len(value) > cap:
        raise fail(host, key, value, f"has {len(value)} items (at most {cap})")


def check_net_host(text: str) -> bool:
    """The host part of ``host[:port]`` or a URL, beyond its grammar: a bracketed literal is an
    IPv6 address, a name of digits and dots an IPv4 one (``[:::::]`` and ``999.999.999.999``
    match the grammar and are neither)."""
    if text.startswith("["):
        try:
            ipaddress.IPv6Address(text[1:-1])
        except ValueError:
            return False
        return True
    if all(p.isdigit() for p in text.split(".")):
        try:
            ipaddress.IPv4Address(text)
        except ValueError:
            return False
    return True


# -- engine flags that load code or open listeners (issue 29) ----------------------------------


def unsafe_flag(arg: str, unsafe: Mapping[str, str], abbreviated: bool) -> tuple[str, str] | None:
    """``(flag, why)`` when ``arg`` sets a flag of ``unsafe`` (flag -> what it does), in any
    spelling `managed_flag` reads."""
    hit = managed_flag(arg, unsafe, abbreviated)
    if hit is None or hit[0] not in unsafe:
        return None
    return hit[0], f"{hit[0]} {unsafe[hit[0]]}; not from host data"


def flag_values(args: Sequence[str], flag: str) -> list[tuple[int, str | None]]:
    """``(index, value)`` of every ``flag VALUE`` and ``flag=VALUE`` in ``args`` (value None for
    a flag given last, or as ``flag.sub=...``, which no check can read whole)."""
    out: list[tuple[int, str | None]] = []
    for i, arg in enumerate(args):
        name, eq, rest = arg.partition("=")
        if _normal(name) == flag:
            out.append((i, rest if eq else (args[i + 1] if i + 1 < len(args) else None)))
        elif _normal(name).startswith(flag + "."):
            out.append((i, None))
    return out
