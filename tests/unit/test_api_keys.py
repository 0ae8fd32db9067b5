"""API keys per inventory (and per host), rotation with an overlap, and ``specdec keys``
(`specdec.config.apikey`, `specdec.cli.keys`; issue 29, item 2)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cryptography import x509

from specdec.cli import main
from specdec.config import apikey
from specdec.errors import ConfigError

HOST = {"specdec_device": "agx-orin-64gb", "specdec_model": "Qwen/Qwen3-0.6B"}


def _inventory(path: Path, hosts: dict[str, dict[str, object]]) -> Path:
    lines = ["hosts = ["] + [f"    ({name!r}, {data!r})," for name, data in hosts.items()]
    path.write_text("\n".join([*lines, "]", ""]))
    return path


def test_two_inventories_never_share_a_key(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "fleet.py", tmp_path / "b" / "fleet.py"  # one stem, two files
    assert apikey.inventory_dir(a) != apikey.inventory_dir(b)
    assert apikey.inventory_dir(a) == apikey.inventory_dir(str(a))  # stable
    ka, _ = apikey.host_key_file(None, "inventory", "h1", apikey.inventory_dir(a))
    kb, _ = apikey.host_key_file(None, "inventory", "h1", apikey.inventory_dir(b))
    assert apikey.ensure_key(ka, create=True) != apikey.ensure_key(kb, create=True)
    assert ka.parent.parent.parent == apikey.state_dir()
    assert stat.S_IMODE(ka.parent.stat().st_mode) == 0o700


def test_scope_host_gives_each_host_its_own_key(tmp_path: Path) -> None:
    inv = apikey.inventory_dir(tmp_path / "fleet.py")
    p1, make1 = apikey.host_key_file(None, "host", "h1", inv)
    p2, _ = apikey.host_key_file(None, "host", "../h2", inv)
    assert make1 and p1 != p2 and inv in p2.parents and ".." not in p2.parts
    assert apikey.ensure_key(p1, create=True) != apikey.ensure_key(p2, create=True)
    given, make = apikey.host_key_file("~/k", "host", "h1", inv)
    assert not make and given == Path("~/k").expanduser()  # the operator's: never made


def test_rotate_keeps_the_old_key_until_retired(tmp_path: Path) -> None:
    path = tmp_path / "api_key"
    first = apikey.ensure_key(path, create=True)
    assert apikey.old_key(path) is None
    second = apikey.rotate(path)
    assert second != first and apikey.read_key(path) == second
    assert apikey.old_key(path) == first  # still accepted (the overlap)
    old_file = tmp_path / ("api_key" + apikey.OLD)
    assert stat.S_IMODE(old_file.stat().st_mode) == 0o600
    with pytest.raises(ConfigError, match="retire it first"):
        apikey.rotate(path)  # never drops a key clients may still use
    assert apikey.read_key(path) == second
    assert apikey.retire(path) and apikey.old_key(path) is None
    assert not apikey.retire(path)  # nothing left to retire
    assert apikey.rotate(path) not in (first, second)


def test_a_fifo_as_key_file_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "k"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(ConfigError, match="not a regular file"):
        apikey.read_key(fifo)  # O_NONBLOCK: it never waits for a writer


def test_keys_cli_rotates_and_retires_without_printing_a_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = _inventory(tmp_path / "fleet.py", {"h1": HOST, "h2": HOST})
    assert main(["keys", "show", str(inv)]) == 0
    path = apikey.inventory_dir(inv) / "api_key"
    first = apikey.read_key(path)
    shown = capsys.readouterr().out
    assert "hosts h1, h2" in shown and "rotated-out: none" in shown and first not in shown
    assert main(["keys", "rotate", str(inv)]) == 0
    second = apikey.read_key(path)
    assert second != first and apikey.old_key(path) == first
    assert main(["keys", "show", str(inv)]) == 0
    out = capsys.readouterr().out
    assert "rotated-out: sha256:" in out and first not in out and second not in out
    assert main(["keys", "rotate", str(inv)]) == 2  # a second rotation before retiring
    assert "retire it first" in capsys.readouterr().err
    assert main(["keys", "retire", str(inv)]) == 0
    assert apikey.old_key(path) is None and apikey.read_key(path) == second


def test_keys_cli_prints_the_inventory_ca(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    inv = _inventory(tmp_path / "fleet.py", {"h1": HOST})
    assert main(["keys", "ca", str(inv)]) == 0
    pem = capsys.readouterr().out
    (ca,) = x509.load_pem_x509_certificates(pem.encode())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert "PRIVATE" not in pem
    off = _inventory(tmp_path / "plain.py", {"h1": {**HOST, "specdec_tls": False}})
    assert main(["keys", "ca", str(off)]) == 2
    assert "no host serves its API with the fleet's CA" in capsys.readouterr().err
    assert main(["keys", "show", str(tmp_path / "missing.py")]) == 2
