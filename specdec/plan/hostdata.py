"""Parse and validate the flat ``specdec_*`` host-data keys into a typed `HostSettings`.

Every check of a single value lives in `specdec.config.hygiene`; this module knows which key gets
which.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from specdec.catalog import ENGINES, METHODS, RUNTIMES
from specdec.config import endpoints, hygiene
from specdec.config.keys import SECRET_MARKERS, KeyReader, did_you_mean, key_text
from specdec.config.settings import (
    BENCH_MODES,
    DEFAULT_BENCH_MODE,
    DEFAULT_HEALTH_TIMEOUT,
    DEFAULT_MEMLOCK,
    PREFIX,
    HostSettings,
)
from specdec.engines.base import Engine
from specdec.engines.registry import ENGINES as ENGINE_IMPLS
from specdec.engines.registry import engine as engine_named
from specdec.engines.version import Version, version_in_tag
from specdec.errors import REDACTED, ConfigError, GateError, Problems, redact
from specdec.gate.inputs import check_policy
from specdec.host.layout import SERVICE_USER
from specdec.plan.hostnet import network_keys
from specdec.plan.sites import registry_name
from specdec.plan.types import GatePolicy

__all__ = [
    "DEFAULT_HEALTH_TIMEOUT",
    "DEFAULT_MEMLOCK",
    "KNOWN_KEYS",
    "MEMLOCK_RANGE",
    "SECRET_MARKERS",
    "HostSettings",
    "as_mapping",
    "parse_host_settings",
    "parse_hosts",
]

# memlock in bytes: at least 64 KiB (the old kernel default), at most 1 TiB (more than any
# device's memory; systemd and dockerd's daemon.json need it well inside int64).
MEMLOCK_RANGE = (65536, 2**40)
MAX_MODEL_LEN = 2**24  # tokens; above the longest context of any catalog model
_USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


def as_mapping(data: Any) -> Mapping[str, Any]:
    """Host data as a mapping: a dict/Mapping, or pyinfra's ``HostData`` (has ``.dict()``)."""
    if data is None:
        return {}
    if isinstance(data, Mapping):
        return data
    to_dict = getattr(data, "dict", None)
    if callable(to_dict):
        result = to_dict()
        if isinstance(result, Mapping):
            return result
    raise ConfigError(f"host data must be a mapping, got {type(data).__name__}")


def _check_unknown(host: str, data: Mapping[str, Any]) -> None:
    for key in sorted(k for k in data if isinstance(k, str) and k.startswith(PREFIX)):
        if key in KNOWN_KEYS:
            continue
        hint = did_you_mean(key[len(PREFIX):], [k[len(PREFIX):] for k in KNOWN_KEYS], PREFIX)
        raise ConfigError(f"unknown key {KeyReader(host, data, KNOWN_KEYS).shown(key, data[key])}"
                          f"{hint}", host=host)


def _spec_tokens(r: KeyReader) -> int | None:
    """An integer pins k; ``auto`` (the default) tunes it on the host."""
    key = "specdec_num_speculative_tokens"
    value = r.get(key)
    if value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int | None) or (
            isinstance(value, int) and not 1 <= value <= 16):
        raise r.fail(key, value, "must be auto or an integer in 1..16")
    return r.int_(key, 1, 16)


def _memlock(r: KeyReader) -> str:
    key = "specdec_memlock"
    value = r.get(key)
    if value is None:
        return DEFAULT_MEMLOCK
    if value in ("unlimited", "infinity"):
        return "unlimited"
    lo, hi = MEMLOCK_RANGE
    why = f'must be "unlimited" or a number of bytes in {lo}..{hi}'
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,20}", value):
        value_int = int(value)  # ASCII digits only: '²'.isdigit() is True, int('²') fails
    elif isinstance(value, int) and not isinstance(value, bool):
        value_int = value
    else:
        raise r.fail(key, value, why)
    if not lo <= value_int <= hi:
        raise r.fail(key, value, why)
    return str(value_int)


def _env(r: KeyReader) -> tuple[tuple[str, str], ...]:
    key = "specdec_env"
    value = r.get(key)
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise r.fail(key, value, "must be a mapping of NAME: value strings")
    hygiene.check_size(r.host, key, value, hygiene.MAX_ENV)
    items = []
    for name, val in value.items():
        hygiene.check_env_name(r.host, key, name)
        marker = next((m for m in SECRET_MARKERS if m in name.upper()), None)
        if marker is not None:
            raise ConfigError(
                f"{key}.{name}: looks like a secret (contains {marker}); secrets do not belong "
                "in host data (the HF token goes to specdec_hf_token_file)",
                host=r.host,
            )
        hygiene.check_env_reserved(r.host, key, name, val, RESERVED_ENV)
        if isinstance(val, bool) or not isinstance(val, str | int | float):
            raise r.fail(f"{key}.{name}", val, "must be a string")
        sval = str(val)
        hygiene.check_text(r.host, f"{key}.{name}", sval, hygiene.MAX_ENV_VALUE,
                           allow_empty=True, allow_spaces=True)
        items.append((name, sval))
    return tuple(sorted(items))


def _engine_version(r: KeyReader, eng: Engine) -> str | None:
    key = "specdec_engine_version"
    value = r.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise r.fail(key, value, "must be a quoted version string (e.g. '0.9.2')")
    text = r.str_(key)
    if text is None:
        return None
    try:
        version = Version.parse(text)
    except ValueError:
        raise r.fail(key, value, "is not a version (e.g. 0.9.2 or 1.2.0rc6)") from None
    if (problem := eng.release_problem(version)) is not None:  # refused before any host
        raise r.fail(key, value, problem)
    return str(version)


def _image(r: KeyReader, eng: Engine) -> str | None:
    """``specdec_image``; a tag stating a release the engine does not know is refused."""
    image = r.get("specdec_image")
    if image is None:
        return None
    ref = hygiene.check_image(r.host, "specdec_image", image)
    stated = version_in_tag(ref.split("@")[0].rsplit("/", 1)[-1].partition(":")[2])
    if stated is not None and (problem := eng.release_problem(stated)) is not None:
        raise r.fail("specdec_image", image, problem)
    return ref


_GATE_FIELDS = {f.name: f for f in dataclasses.fields(GatePolicy)}


def _gate(r: KeyReader) -> GatePolicy:
    key = "specdec_gate"
    value = r.get(key)
    if value is None:
        return GatePolicy()
    if not isinstance(value, Mapping):
        raise r.fail(key, value, "must be a mapping of GatePolicy fields")
    kwargs: dict[str, Any] = {}
    for name, val in value.items():
        if name not in _GATE_FIELDS:
            hint = did_you_mean(str(name), _GATE_FIELDS)
            raise r.fail(f"{key}.{key_text(name)}", val, f"unknown gate field{hint}")
        field = f"{key}.{name}"
        if isinstance(getattr(GatePolicy(), name), int):
            kwargs[name] = hygiene.check_int(r.host, field, val, 1, 1024)
        elif name == "confidence":
            kwargs[name] = hygiene.check_number(r.host, field, val, 0, 1, hi_open=True)
        else:  # a fraction, e.g. 0.3 for 30%
            kwargs[name] = hygiene.check_number(r.host, field, val, -1, 10, hi_open=True)
    pol = GatePolicy(**kwargs)
    try:
        check_policy(pol, key)
    except GateError as exc:
        raise ConfigError(str(exc), host=r.host) from None
    return pol


WATCH_ACTIONS = ("report", "reverify")


def _watch(r: KeyReader) -> str:
    """``specdec_watch: {action: report | reverify}``: what `specdec watch` does when
    speculation stops paying (or would pay where it is off): report only (default), or mark the
    host so the next deploy re-verifies it."""
    key = "specdec_watch"
    value = r.get(key)
    if value is None:
        return "report"
    if not isinstance(value, Mapping):
        raise r.fail(key, value, "must be a mapping like {action: report}")
    for name in value:
        if name != "action":
            hint = did_you_mean(str(name), ["action"])
            raise ConfigError(f"{key}.{key_text(name)}={hygiene.show(value[name])}: unknown "
                              f"field{hint}", host=r.host)
    action = value.get("action", "report")
    if action not in WATCH_ACTIONS:
        raise ConfigError(f"{key}.action={hygiene.show(action)}: must be one of "
                          f"{', '.join(WATCH_ACTIONS)}", host=r.host)
    return str(action)


def _bench_mode(r: KeyReader) -> str:
    """host (the host's python3), image (the engine's image) or control (the control node)."""
    mode = r.str_("specdec_bench_mode", BENCH_MODES) or DEFAULT_BENCH_MODE
    if mode == "image" and r.get("specdec_runtime") == "native":
        raise r.fail("specdec_bench_mode", mode, "the native runtime has no engine image; "
                                                 "use host or control")
    return mode


_GROUP_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,30}")
GROUP_KEYS = ("group", "group_frontend")
_GROUP_ENGINES = tuple(n for n, e in ENGINE_IMPLS.items() if e.serves_groups)
# every variable an engine's units set is specdec's, not the host data's
RESERVED_ENV = tuple(n for e in ENGINE_IMPLS.values() for n in e.reserved_env)


# Accounts of the distribution and its packages (Debian base-passwd's static ones, Debian
# Policy 9.2.2; what systemd, apt, OpenSSH, D-Bus, nginx, etcd-server, docker-registry, Docker
# and the NVIDIA images add): never the service user, whom specdec gives its home and the docker
# group. Any other existing account is refused on the host unless specdec made it
# (`specdec.roles.common`, its comment); these are refused before a host is touched.
SYSTEM_ACCOUNTS = frozenset({
    "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy",
    "www-data", "backup", "list", "irc", "gnats", "nobody", "messagebus", "sshd", "syslog",
    "uuidd", "tcpdump", "etcd", "docker-registry", "dnsmasq", "avahi", "polkitd", "pollinate",
    "landscape", "lxd", "tss", "usbmux", "rtkit", "colord", "geoclue", "pulse", "kernoops",
    "saned", "whoopsie", "speech-dispatcher", "cups-pk-helper", "fwupd-refresh", "dhcpcd",
    "ubuntu", "nvidia", "gdm", "sddm", "lightdm", "ntp", "chrony", "postfix", "statd",
})


def _service_user(r: KeyReader, ssh_user: str | None) -> str:
    """A dedicated system account: never root, never the account the deploy logs in as, never
    an account of the distribution (the service user is made a nologin system user with
    specdec's home)."""
    key = "specdec_service_user"
    user = r.str_(key) or SERVICE_USER
    if not _USER_NAME.fullmatch(user):
        raise r.fail(key, user, "is not a valid user name")
    if user == "root" or user == ssh_user:
        who = "root" if user == "root" else "the SSH login user (ssh_user)"
        raise r.fail(key, user, f"is {who}; the service user must be a dedicated system "
                     "account")
    if user in SYSTEM_ACCOUNTS or user.startswith(("systemd-", "_")):
        raise r.fail(key, user, "is an account of the distribution or a package; the service "
                     "user must be an account of specdec's own")
    return user


def _group(r: KeyReader) -> dict[str, Any]:
    out: dict[str, Any] = {}
    group = r.str_("specdec_group")
    if group is not None and not _GROUP_NAME.fullmatch(group):
        raise r.fail("specdec_group", group, "a group name is lowercase letters, digits and - "
                     "(at most 31)")
    out["group"] = group
    front = r.get("specdec_group_frontend")
    try:
        out["group_frontend"] = None if front is None else hygiene.check_host_name(front)
    except ConfigError as exc:  # name the key: it is not this host's name that is bad
        why = str(exc).split(": ", 1)[1]
        raise r.fail("specdec_group_frontend", front, why) from None
    return out


_SITE_NAME = _GROUP_NAME
SITE_KEYS = ("site", "site_mirror", "site_mirror_address", "hub_endpoint", "hub_upstream",
             "hub_cdn_hosts", "registry_upstreams", "mirror_resolver", "tune_cache")
_MIRROR_ONLY = ("site_mirror_address", "hub_upstream", "hub_cdn_hosts", "registry_upstreams",
                "mirror_resolver")


def _site(r: KeyReader) -> dict[str, Any]:
    """The site keys (`specdec.plan.sites`): each value checked, mirror-only keys only on a
    mirror."""
    h = r.host
    site = r.str_("specdec_site")
    if site is not None and not _SITE_NAME.fullmatch(site):
        raise r.fail("specdec_site", site, "a site name is lowercase letters, digits and - "
                     "(at most 31)")
    mirror = r.bool_("specdec_site_mirror", False)
    if mirror and site is None:
        raise r.fail("specdec_site_mirror", True, "a site mirror serves a site: set specdec_site")
    for key in _MIRROR_ONLY:
        if not mirror and r.get(f"specdec_{key}") is not None:
            raise r.fail(f"specdec_{key}", r.get(f"specdec_{key}"),
                         "only applies with specdec_site_mirror: true")
    out: dict[str, Any] = {"site": site, "site_mirror": mirror}
    addr = r.get("specdec_site_mirror_address")
    out["site_mirror_address"] = None if addr is None else hygiene.check_host_port(
        h, "specdec_site_mirror_address", addr, port=False)
    for key in ("hub_endpoint", "hub_upstream"):
        v = r.get(f"specdec_{key}")
        out[key] = None if v is None else hygiene.check_url(h, f"specdec_{key}", v)
    cdn = r.get("specdec_hub_cdn_hosts")
    if cdn is not None:
        if not isinstance(cdn, list | tuple) or not cdn:
            raise r.fail("specdec_hub_cdn_hosts", cdn, "must be a list of host[:port] names")
        hygiene.check_size(h, "specdec_hub_cdn_hosts", cdn, 32)
        out["hub_cdn_hosts"] = tuple(endpoints.check_remote_host(h, "specdec_hub_cdn_hosts", c)
                                     for c in cdn)
    regs = r.get("specdec_registry_upstreams")
    if regs is not None:
        if not isinstance(regs, Mapping):
            raise r.fail("specdec_registry_upstreams", regs,
                         "must be a mapping of registry host[:port] to its upstream URL")
        hygiene.check_size(h, "specdec_registry_upstreams", regs, 16)
        out["registry_upstreams"] = tuple(sorted(
            (hygiene.check_host_port(h, "specdec_registry_upstreams", k),
             hygiene.check_url(h, f"specdec_registry_upstreams.{k}", v))
            for k, v in regs.items()))
        _distinct_registry_names(h, [k for k, _ in out["registry_upstreams"]])
    res = r.get("specdec_mirror_resolver")
    out["mirror_resolver"] = None if res is None else hygiene.check_host_port(
        h, "specdec_mirror_resolver", res, port=False)
    out["tune_cache"] = r.str_("specdec_tune_cache", max_len=hygiene.MAX_PATH)
    return out


def _distinct_registry_names(host: str, registries: list[str]) -> None:
    """Each registry's cache has its own files and unit (`registry_name`): two registries whose
    names make the same one would overwrite each other's."""
    seen: dict[str, str] = {}
    for reg in registries:
        name = registry_name(reg)
        if name in seen:
            raise ConfigError(f"specdec_registry_upstreams: {reg!r} and {seen[name]!r} would "
                              f"share one cache (both named {name!r}); keep one", host=host)
        seen[name] = reg


def _engine_keys(r: KeyReader, engine: str | None) -> dict[str, Any]:
    """The serving-group keys and every engine's own keys, each checked; a key set for an engine
    other than the host's is an error. The host's engine's keys become ``engine_options``."""
    group = _group(r)
    options = {name: e.read_options(r) for name, e in ENGINE_IMPLS.items()}
    chosen = engine_named(engine).name
    for key, value in group.items():
        if value is not None and chosen not in _GROUP_ENGINES:
            raise r.fail(f"specdec_{key}", value, "only applies to specdec_engine="
                         + " or ".join(repr(n) for n in _GROUP_ENGINES))
    for name, found in options.items():
        if name != chosen and found:
            key = next(k for k in ENGINE_IMPLS[name].option_keys if k in found)
            raise r.fail(f"specdec_{key}", found[key], f"only applies to specdec_engine={name!r}")
    out = {k: v for k, v in group.items() if v is not None}
    if options[chosen]:
        out["engine_options"] = tuple(sorted(options[chosen].items()))
    return out


def parse_host_settings(host: str, data: Any) -> HostSettings:
    """Validate the host name and the ``specdec_*`` keys of ``data`` (other keys are ignored)."""
    hygiene.check_host_name(host)
    mapping = as_mapping(data)
    _check_unknown(host, mapping)
    r = KeyReader(host, mapping, KNOWN_KEYS)
    # the keys are checked in this order: the first bad one is the error
    first = _login_keys(r)
    engine = r.str_("specdec_engine", ENGINES)
    eng = engine_named(engine)
    return HostSettings(
        host=host,
        **first,
        **_serving_keys(r, engine, eng),
        **_model_keys(r),
        **_engine_keys(r, engine),
        **_site(r),
        **network_keys(r, KNOWN_KEYS),
        keys=frozenset(
            k for k, v in mapping.items() if isinstance(k, str) and k.startswith(PREFIX)
            and v is not None
        ),
    )


def _login_keys(r: KeyReader) -> dict[str, Any]:
    """The keys checked first: the memory share, the SSH login and the service user, the HF
    token file (a path, never the token)."""
    util = r.get("specdec_gpu_memory_utilization")
    if util is not None:
        util = hygiene.check_number(r.host, "specdec_gpu_memory_utilization", util, 0, 1,
                                    hi_open=True)
    ssh_user = r.data.get("ssh_user") if isinstance(r.data.get("ssh_user"), str) else None
    service_user = _service_user(r, ssh_user)
    ssh = r.data.get("ssh_hostname")
    if ssh is not None:
        hygiene.check_address(r.host, "ssh_hostname", ssh)
    token_file = r.get("specdec_hf_token_file")
    if isinstance(token_file, str) and redact(token_file) != token_file:
        raise ConfigError(
            f"specdec_hf_token_file={REDACTED}: must be a path to a file holding the token "
            "(on the control node), not the token itself",
            host=r.host,
        )
    return {"gpu_memory_utilization": util, "ssh_user": ssh_user, "service_user": service_user,
            "ssh_hostname": ssh,
            "hf_token_file": r.str_("specdec_hf_token_file", max_len=hygiene.MAX_PATH)}


def _serving_keys(r: KeyReader, engine: str | None, eng: Engine) -> dict[str, Any]:
    """What runs and how: device, engine, model, speculation, limits, image, environment."""
    extra_args = r.get("specdec_extra_args")
    return dict(
        device=r.str_("specdec_device"),
        engine=engine,
        runtime=r.str_("specdec_runtime", RUNTIMES),
        model=r.repo_id("specdec_model"),
        method=r.str_("specdec_method", METHODS),
        draft=r.repo_id("specdec_draft"),
        num_speculative_tokens=_spec_tokens(r),
        max_model_len=r.int_("specdec_max_model_len", 128, MAX_MODEL_LEN),
        max_num_seqs=r.int_("specdec_max_num_seqs", 1, 1024),
        port=r.int_("specdec_port", 1024, 65535),
        image=_image(r, eng),
        engine_version=_engine_version(r, eng),
        memlock=_memlock(r),
        env=_env(r),
        extra_args=_extra_args(r, eng, extra_args),
        jetson_tuning=r.bool_("specdec_jetson_tuning", True),
        health_timeout=r.int_("specdec_health_timeout", 30, 24 * 3600) or DEFAULT_HEALTH_TIMEOUT,
    )


def _extra_args(r: KeyReader, eng: Engine, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    key = "specdec_extra_args"
    args = hygiene.check_engine_args(r.host, key, value, eng.managed_flags,
                                     eng.abbreviated_flags, eng.unsafe_flags)
    eng.check_args(r.host, key, args)
    return args


def _model_keys(r: KeyReader) -> dict[str, Any]:
    """The gate, the model's figures when the catalog lacks them, verification and watch."""
    return dict(
        gate=_gate(r),
        model_params_b=r.float_("specdec_model_params_b", 2000),
        model_weight_gib=r.float_("specdec_model_weight_gib", 4096),
        model_kv_bytes_per_token=r.int_("specdec_model_kv_bytes_per_token", 1, 2**24),
        model_tokenizer=r.str_("specdec_model_tokenizer"),
        reverify=r.bool_("specdec_reverify", False),
        verify=r.bool_("specdec_verify", True),
        bench_mode=_bench_mode(r),
        watch_action=_watch(r),
    )


def parse_hosts(hosts: Iterable[tuple[str, Any]],
                overrides: Mapping[str, Any] | None = None) -> list[HostSettings]:
    """Every host's settings, in order (``overrides``: values over each host's data, as
    pyinfra's ``--data``); any bad key of any host raises `Problems`: every one of them."""
    settings, errors = parse_hosts_all(hosts, overrides)
    Problems.raise_if_any(errors)
    return settings


def parse_hosts_all(hosts: Iterable[tuple[str, Any]],
                    overrides: Mapping[str, Any] | None = None
                    ) -> tuple[list[HostSettings], list[ConfigError]]:
    """The settings of the hosts whose data is good, and every bad key of the others."""
    out: list[HostSettings] = []
    errors: list[ConfigError] = []
    for name, data in hosts:
        settings, bad = parse_host_collect(name, {**as_mapping(data), **(overrides or {})})
        errors += bad
        if settings is not None:
            out.append(settings)
    return out, errors


# `KeyReader.fail` and `specdec.config.hygiene` start a message with ``[unknown key ]KEY=…``.
_BAD_KEY = re.compile(r"^(?:unknown key )?([A-Za-z_][A-Za-z0-9_]{0,63})=")


def parse_host_collect(host: str, data: Any) -> tuple[HostSettings | None, list[ConfigError]]:
    """`parse_host_settings`, every bad key reported: a key that fails is set aside and the
    rest read again, until the data parses or an error names no key of it."""
    mapping = dict(as_mapping(data))
    errors: list[ConfigError] = []
    while True:
        try:
            settings = parse_host_settings(host, mapping)
        except ConfigError as exc:
            errors.append(exc)
            text = str(exc).removeprefix(f"{host}: ")
            m = _BAD_KEY.match(text)
            if m is None or m.group(1) not in mapping:
                return None, errors
            del mapping[m.group(1)]
        else:
            return (None if errors else settings), errors


KNOWN_KEYS = tuple(
    PREFIX + name
    for name in (
        "device", "engine", "runtime", "model", "method", "draft", "num_speculative_tokens",
        "gpu_memory_utilization", "max_model_len", "max_num_seqs", "port", "image",
        "engine_version", "memlock",
        "env", "extra_args", "jetson_tuning", "health_timeout", "gate", "model_params_b",
        "model_weight_gib", "model_kv_bytes_per_token", "model_tokenizer", "hf_token_file",
        "reverify", "verify", "bench_mode", "watch", "service_user", *GROUP_KEYS, *SITE_KEYS,
        "listen", "allow_from", "engine_port", "api_key_file", "tls", "pki_dir",
        "trust_remote_code",
        *(k for e in ENGINE_IMPLS.values() for k in e.option_keys),
    )
)
