"""Devices that drop off (unreachable, its budget, --resume) and several control nodes
(--shard over a fleet store, report --merge), with a fake pyinfra."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from specdec.cli import main
from specdec.config import pki
from specdec.errors import RolloutError
from specdec.fleet import rollout as ro
from specdec.fleet import shard as sh
from specdec.fleet.resume import to_resume
from specdec.fleet.store import EtcdStore, LocalStore, TLSFiles, open_store, update_json
from specdec.plan.groups import Group
from specdec.report.fleet import load_reports, skipped_report, write_host_report
from specdec.report.merge import merge_runs


class Fleet:
    """A fake pyinfra over hosts that may be down: a down host gets pyinfra's connect error
    line and no report; ``lose`` hosts connect, then lose the link (the deploy's report says
    failed)."""

    def __init__(self, down: set[str] = frozenset(), lose: set[str] = frozenset(),
                 outcomes: dict[str, str] | None = None) -> None:
        self.down, self.lose = set(down), set(lose)
        self.outcomes = outcomes or {}
        self.deployed: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, cmd: list[str], env: Any, cwd: Path) -> tuple[int, str, dict[str, str]]:
        hosts = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--limit"]
        run_dir = Path(env["SPECDEC_REPORTS_DIR"]) / env["SPECDEC_RUN_ID"]
        lines = []
        for h in hosts:
            if h in self.down:
                lines.append(f"\x1b[1m[{h}]\x1b[0m  \x1b[31mCould not connect (timed out)\x1b[0m")
                continue
            with self.lock:
                self.deployed.append(h)
            if h in self.lose:
                lines.append(f"[{h}] Command socket/SSH error: Socket is closed")
                out = "failed"
            else:
                out = self.outcomes.get(h, "kept")
            write_host_report(run_dir, skipped_report(h, env["SPECDEC_RUN_ID"], f"{out} here",
                                                      outcome=out, phase="done"), fleet=False)
        rc = 1 if lines or any(self.outcomes.get(h) in ro.FAILED for h in hosts) else 0
        return rc, "", ro.lost_hosts(lines)


def plan(tmp: Path, hosts: list[str], batches: str = "1,25%,100%", resume: bool = False,
         **kw: Any) -> ro.RolloutPlan:
    return ro.RolloutPlan(inventory=tmp / "inv.py", hosts=hosts,
                          batches=ro.batch_hosts(hosts, ro.parse_batches(batches)),
                          max_fail_percent=kw.pop("max_fail", 0), run_id="run1",
                          reports_root=tmp / "reports", resume=resume, **kw)


HOSTS = [f"h{i}" for i in range(8)]
quiet = {"say": lambda s: None}


def outcomes(tmp: Path) -> dict[str, str]:
    return {r["host"]: r["outcome"] for r in load_reports(tmp / "reports" / "run1")}


def test_lost_hosts_reads_pyinfra_lines():
    got = ro.lost_hosts(["\x1b[1m[a]\x1b[0m \x1b[31mCould not connect (timed out)\x1b[0m",
                         "[b]    Command socket/SSH error: Socket is closed",
                         "[c] Success", "[d] Authentication error (keys: x)"])
    assert got == {"a": "Could not connect (timed out)",
                   "b": "Command socket/SSH error: Socket is closed"}


def test_unreachable_is_its_own_outcome_not_a_failure(tmp_path):
    fleet = Fleet(down={"h3", "h6"}, lose={"h5"})
    res = ro.run_rollout(plan(tmp_path, HOSTS), fleet, **quiet)
    got = outcomes(tmp_path)
    assert got["h3"] == got["h6"] == got["h5"] == "unreachable"
    assert all(got[h] == "kept" for h in HOSTS if h not in ("h3", "h5", "h6"))
    assert res.stopped_after is None and res.exit_code == 3  # only unreachable left
    rep = json.loads((tmp_path / "reports/run1/h5.json").read_text())
    assert "Socket is closed" in rep["message"] and "failed here" in rep["message"]
    assert "--resume run1" in rep["message"] and rep["phase"] == "connect"
    summary = (tmp_path / "reports/run1/summary.md").read_text()
    assert "3 unreachable" in summary and "| unreachable |" in summary
    assert "unreachable" in (tmp_path / "reports/run1/index.html").read_text()


def test_unreachable_budget_and_an_unreached_batch_stop(tmp_path):
    # canary unreachable: nothing reached, the rollout stops (Ansible: a batch all unreachable)
    res = ro.run_rollout(plan(tmp_path, HOSTS), Fleet(down={"h0"}), **quiet)
    assert res.stopped_after == 1 and outcomes(tmp_path)["h1"] == "skipped"
    # batch 2 (h1, h2) has 1/2 unreachable: over a 40% budget, under the default 100%
    shutil.rmtree(tmp_path / "reports")
    res = ro.run_rollout(plan(tmp_path, HOSTS, max_unreachable_percent=40),
                         Fleet(down={"h2"}), **quiet)
    assert res.stopped_after == 2 and outcomes(tmp_path)["h3"] == "skipped"
    shutil.rmtree(tmp_path / "reports")
    res = ro.run_rollout(plan(tmp_path, HOSTS), Fleet(down={"h2"}), **quiet)
    assert res.stopped_after is None
    # a failure still counts against --max-fail-percent, apart from unreachable hosts
    shutil.rmtree(tmp_path / "reports")
    res = ro.run_rollout(plan(tmp_path, HOSTS), Fleet(down={"h1"}, outcomes={"h2": "failed"}),
                         **quiet)
    assert res.stopped_after == 2 and res.exit_code == 1


def test_resume_finishes_the_hosts_that_did_not_converge(tmp_path):
    fleet = Fleet(down={"h3", "h6"}, lose={"h5"}, outcomes={"h7": "rolled_back"})
    first = plan(tmp_path, HOSTS, params={"batches": "1,25%,100%"})
    ro.run_rollout(first, fleet, **quiet)
    hosts, left = to_resume(tmp_path / "reports/run1")
    assert hosts == HOSTS and left == {"h3": "unreachable", "h5": "unreachable",
                                       "h6": "unreachable", "h7": "rolled_back"}
    back = Fleet(outcomes={"h5": "rolled_back"})  # h5's guard reverted it meanwhile
    todo = [h for h in HOSTS if h in left]
    again = ro.RolloutPlan(**{**plan(tmp_path, todo, "100%").__dict__, "resume": True})
    res = ro.run_rollout(again, back, **quiet)
    assert sorted(back.deployed) == todo
    got = outcomes(tmp_path)
    assert got["h3"] == got["h6"] == "kept" and got["h5"] == "rolled_back"
    assert len(got) == 8 and sum(o == "kept" for o in got.values()) == 7  # one run
    rep = json.loads((tmp_path / "reports/run1/h3.json").read_text())
    assert [a["outcome"] for a in rep["attempts"]] == ["unreachable"]
    assert res.exit_code == 1  # rolled back hosts are still failures
    assert json.loads((tmp_path / "reports/run1/hosts.json").read_text()) == HOSTS


@pytest.mark.usefixtures("hf_token")
def test_cli_resume(tmp_path, capsys, monkeypatch):
    fleet = Fleet(down={"agx-orin-01"})
    real = ro.run_rollout
    monkeypatch.setattr(ro, "run_rollout", lambda p, **kw: real(p, fleet, say=print, **kw))
    rc = main(["rollout", "inventories/jetsons.py", "--reports", str(tmp_path), "--run-id",
               "r", "--batches", "2,100%"])
    assert rc == 3 and "--resume r" in capsys.readouterr().err
    fleet.down.clear()
    fleet.deployed.clear()
    rc = main(["rollout", "inventories/jetsons.py", "--reports", str(tmp_path), "--resume", "r"])
    out = capsys.readouterr().out
    assert rc == 0 and fleet.deployed == ["agx-orin-01"], out
    assert "1 host(s) to finish: agx-orin-01 (unreachable)" in out
    assert main(["rollout", "inventories/jetsons.py", "--reports", str(tmp_path),
                 "--resume", "r"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert main(["rollout", "inventories/jetsons.py", "--reports", str(tmp_path),
                 "--resume", "nope"]) == 2
    assert "hosts.json" in capsys.readouterr().err


# -- several control nodes -------------------------------------------------------------


def test_shard_mapping_is_stable_and_keeps_groups_whole():
    g = Group("pair", ("d1", "d2"), "d1", (("d1", "a"), ("d2", "b")))
    groups = {"d1": g, "d2": g}
    hosts = [f"h{i}" for i in range(40)]
    order = [[h] for h in hosts[:10]] + [["d1", "d2"]] + [[h] for h in hosts[10:]]
    batches = ro.parse_batches("1,25%,100%")
    seen: list[str] = []
    canaries = 0
    for i in (1, 2, 3):
        mine, runs_canary, has = sh.shard_batches(order, groups, sh.Shard(i, 3), batches, True)
        flat = [h for b in mine for h in b]
        seen += flat
        canaries += runs_canary
        assert has and (not runs_canary or mine[0] == ["h0"])
        if "d1" in flat:
            assert any(b[b.index("d1"):b.index("d1") + 2] == ["d1", "d2"] for b in mine
                       if "d1" in b)
    assert sorted(seen) == sorted(hosts + ["d1", "d2"]) and canaries == 1
    # the same host maps to the same shard in a smaller or reordered fleet
    assert sh.unit_shard(["h7"], {}, 3) == sh.unit_shard(["h7"], groups, 3)
    with pytest.raises(RolloutError, match="--shard='3/2'"):
        sh.parse_shard("3/2")


def _shard_run(tmp: Path, store: Any, fleet: Fleet, n: int, i: int,
               hosts: list[str], batches: str = "1,25%,100%") -> ro.RolloutResult:
    order = [[h] for h in hosts]
    mine, runs_canary, has = sh.shard_batches(order, {}, sh.Shard(i, n),
                                              ro.parse_batches(batches), True)
    root = tmp / f"node{i}"
    coord = sh.ShardCoordinator(store=store, run_id="run1", shard=sh.Shard(i, n),
                                runs_canary=runs_canary, has_canary=has, digest="d",
                                tune_dir=root / "cache" / "tune", max_fail_percent=0,
                                max_unreachable_percent=100, poll=0.05, say=lambda s: None)
    coord.register()
    p = ro.RolloutPlan(inventory=tmp / "inv.py", hosts=hosts, batches=mine,
                       max_fail_percent=0, run_id="run1", reports_root=root)
    return ro.run_rollout(p, fleet, coord=coord, say=lambda s: None)


def _two_shards(tmp: Path, store: Any, fleet: Fleet, hosts: list[str]) -> list[Any]:
    results: list[Any] = [None, None]

    def go(i: int) -> None:
        results[i - 1] = _shard_run(tmp, store, fleet, 2, i, hosts)

    threads = [threading.Thread(target=go, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_two_shards_one_canary_no_host_twice(tmp_path):
    hosts = [f"h{i}" for i in range(16)]
    store = LocalStore(tmp_path / "store")
    fleet = Fleet()
    _two_shards(tmp_path, store, fleet, hosts)
    assert sorted(fleet.deployed) == sorted(hosts)  # each host once
    assert fleet.deployed[0] == "h0"  # the canary ran before any other host
    merged = merge_runs([tmp_path / "node1/run1", tmp_path / "node2/run1"],
                        tmp_path / "merged/run1")
    assert merged == hosts
    assert json.loads(store.get("runs/run1/canary") or "{}")["hosts"] == ["h0"]
    assert json.loads(store.get("runs/run1/budget") or "{}")["done"] == 16
    with pytest.raises(RolloutError, match="deployed by two shards"):
        merge_runs([tmp_path / "node1/run1", tmp_path / "node1/run1"], tmp_path / "m2")


def test_failed_canary_stops_every_shard(tmp_path):
    hosts = [f"h{i}" for i in range(16)]
    fleet = Fleet(outcomes={"h0": "rolled_back"})
    res = _two_shards(tmp_path, LocalStore(tmp_path / "store"), fleet, hosts)
    assert fleet.deployed == ["h0"]
    assert {r.stopped_after for r in res} <= {0, 1}
    reps = load_reports(tmp_path / "node1/run1") + load_reports(tmp_path / "node2/run1")
    skipped = [r for r in reps if r["outcome"] == "skipped"]
    assert len(skipped) == 15 and all("canary" in r["message"] or "batch 1 had 1/1 failed"
                                      in r["message"] for r in skipped)


def test_fleet_budget_is_shared_and_claims_refuse_a_second_shard(tmp_path):
    hosts = [f"h{i}" for i in range(16)]
    store = LocalStore(tmp_path / "store")
    late = [h for h in hosts[1:] if sh.unit_shard([h], {}, 2) == 2][-1]
    fleet = Fleet(outcomes={late: "failed"})
    _two_shards(tmp_path, store, fleet, hosts)
    # the fleet-wide budget is shared: whichever shard counts the failure first stops both
    stop = store.get("runs/run1/stop") or ""
    assert stop.startswith(("stopped by shard 1/2", "stopped by shard 2/2")), stop
    assert "fleet-wide 1/" in stop or "failed" in stop, stop
    # a second control node started as the same shard deploys nothing twice
    again = Fleet()
    _shard_run(tmp_path / "again", store, again, 2, 1, hosts)
    assert again.deployed == []


def test_tune_cache_is_shared_first_entry_wins(tmp_path):
    store = LocalStore(tmp_path / "store")
    mk = {"store": store, "run_id": "r", "shard": sh.Shard(1, 2), "runs_canary": False,
          "has_canary": False, "digest": "d", "max_fail_percent": 0,
          "max_unreachable_percent": 100}
    a = sh.ShardCoordinator(tune_dir=tmp_path / "a", **mk)
    b = sh.ShardCoordinator(tune_dir=tmp_path / "b", **mk)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "e1e1e1.json").write_text('{"k": 1}')
    a.push_tune()
    b.pull_tune()
    assert (tmp_path / "b" / "e1e1e1.json").read_text() == '{"k": 1}'
    (tmp_path / "b" / "e1e1e1.json").write_text('{"k": 2}')
    b.push_tune()
    assert store.get("tune/e1e1e1.json") == '{"k": 1}'


class _AnyKeys:
    """A fleet store as anyone with access to etcd could fill it: keys are arbitrary text."""

    def __init__(self, keys: dict[str, str]) -> None:
        self.keys = keys

    def list(self, prefix: str) -> dict[str, str]:
        return dict(self.keys)

    def describe(self) -> str:
        return "etcd://x:2379"


@pytest.mark.parametrize("key", ["tune/a/..", "tune/..", "tune/../../etc/cron.d/x.json",
                                 "tune/ZZZZZZ.json", "tune/e1e1e1.json/..", "tune/\x1b[2J.json",
                                 "tune/" + "a" * 70 + ".json", "tune/e1e1e1.json\n"])
def test_a_fleet_store_key_is_no_file_name_until_checked(tmp_path, key):
    """``tune/a/..`` made the shard's pull write to the tune directory's parent: a traceback
    (issue 29). Only ``tune/<hex>.json`` becomes a file; anything else is skipped, said once."""
    said: list[str] = []
    store = _AnyKeys({key: "evil", "tune/abcdef.json": "{}"})
    c = sh.ShardCoordinator(store=store, run_id="r", shard=sh.Shard(1, 1),  # type: ignore[arg-type]
                            runs_canary=False, has_canary=False, digest="d",
                            tune_dir=tmp_path / "t" / "tune", max_fail_percent=0,
                            max_unreachable_percent=100, say=said.append)
    c.pull_tune()
    assert [p.name for p in (tmp_path / "t").rglob("*")] == ["tune", "abcdef.json"]
    assert len(said) == 1 and "ignored" in said[0] and "\x1b" not in said[0], said


def test_an_etcd_value_that_is_not_text_is_one_line(monkeypatch):
    store = EtcdStore(["http://127.0.0.1:1"])
    monkeypatch.setattr(store, "_call", lambda path, body: {"kvs": [
        {"key": "c3BlY2RlYy90dW5lL3g=", "value": "//79/A=="}]})
    with pytest.raises(RolloutError, match="not base64 of UTF-8 text"):
        store.list("tune")


def test_shards_refuse_a_different_plan(tmp_path):
    store = LocalStore(tmp_path / "s")
    kw = {"store": store, "run_id": "r", "shard": sh.Shard(1, 2), "runs_canary": False,
          "has_canary": False, "tune_dir": tmp_path, "max_fail_percent": 0,
          "max_unreachable_percent": 100}
    sh.ShardCoordinator(digest="a", **kw).register()
    with pytest.raises(RolloutError, match="every shard must be given the same"):
        sh.ShardCoordinator(digest="b", **kw).register()


def test_local_store_cas_under_threads(tmp_path):
    store = LocalStore(tmp_path)

    def bump() -> None:
        for _ in range(25):
            update_json(store, "n", lambda v: (v or 0) + 1)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert json.loads(store.get("n") or "0") == 100
    assert not store.create("n", "1") and store.list("tune") == {}
    with pytest.raises(RolloutError, match="fleet store key"):
        store.get("../x")
    with pytest.raises(RolloutError, match="--store"):
        open_store("etcd://no port")
    with pytest.raises(RolloutError, match="--store-ca"):
        open_store("etcds://h:2379")
    # TLS files with etcd:// ran plaintext, the files silently unused (issue 29): refused, and
    # with a directory store too
    tls = TLSFiles(ca=Path("/ca.crt"))
    with pytest.raises(RolloutError, match=r"^--store='etcd://h:2379': plaintext, but TLS files"):
        open_store("etcd://h:2379", tls)
    with pytest.raises(RolloutError, match="are for etcds://"):
        open_store(str(Path("/tmp/specdec-store")), tls)


def _etcd(tmp_path, scheme: str, *tls: str) -> tuple[subprocess.Popen, int]:
    """etcd 3.4 on free loopback ports (clients over ``scheme``, extra ``tls`` flags)."""
    import socket

    with socket.socket() as s1, socket.socket() as s2:
        s1.bind(("127.0.0.1", 0))
        s2.bind(("127.0.0.1", 0))
        client, peer = s1.getsockname()[1], s2.getsockname()[1]
    proc = subprocess.Popen(
        ["etcd", "--data-dir", str(tmp_path / "etcd"), "--name", "t",
         "--listen-client-urls", f"{scheme}://127.0.0.1:{client}",
         "--advertise-client-urls", f"{scheme}://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"t=http://127.0.0.1:{peer}", *tls],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, client


@pytest.fixture
def etcd(tmp_path):
    if shutil.which("etcd") is None:
        pytest.fail("etcd is not installed ('make setup' installs etcd-server)")
    proc, client = _etcd(tmp_path, "http")
    try:
        store = open_store(f"etcd://127.0.0.1:{client}")
        deadline = time.monotonic() + 20
        while True:
            try:
                store.get("ping")
                break
            except RolloutError:
                assert time.monotonic() < deadline, "etcd did not start"
                time.sleep(0.2)
        yield store
    finally:
        proc.terminate()
        proc.wait(10)


def test_two_shards_over_etcd(tmp_path, etcd):
    assert etcd.create("a/b", "1") and not etcd.create("a/b", "2")
    assert etcd.swap("a/b", "1", "3") and not etcd.swap("a/b", "1", "4")
    assert etcd.list("a") == {"a/b": "3"}
    hosts = [f"h{i}" for i in range(12)]
    fleet = Fleet(down={"h5"})
    _two_shards(tmp_path, etcd, fleet, hosts)
    assert sorted(fleet.deployed) == sorted(h for h in hosts if h != "h5")
    assert json.loads(etcd.get("runs/run1/budget") or "{}") == {"done": 12, "failed": 0,
                                                               "unreachable": 1}


@pytest.mark.usefixtures("hf_token")
def test_cli_two_shards_share_the_default_store(tmp_path, monkeypatch, capsys):
    fleet = Fleet()
    real = ro.run_rollout
    monkeypatch.setattr(ro, "run_rollout", lambda p, **kw: real(p, fleet, say=print, **kw))
    rcs: dict[int, int] = {}

    def shard(i: int) -> None:
        rcs[i] = main(["rollout", "inventories/jetsons.py", "--reports", str(tmp_path),
                       "--run-id", "s", "--shard", f"{i}/2", "--batches", "1,100%"])

    threads = [threading.Thread(target=shard, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert rcs == {1: 0, 2: 0}, capsys.readouterr()
    assert sorted(fleet.deployed) == ["agx-orin-01", "orin-nano-01", "orin-nano-02",
                                      "orin-nx-01"]
    assert fleet.deployed[0] == "agx-orin-01"  # the canary first
    store = LocalStore(tmp_path / "fleet")  # the default: REPORTS/fleet
    assert json.loads(store.get("runs/s/budget") or "{}")["done"] == 4
    assert len(load_reports(tmp_path / "s")) == 4  # one reports root: one run
    # every shard needs the same run id; --store only with --shard
    assert main(["rollout", "inventories/jetsons.py", "--reports", str(tmp_path),
                 "--shard", "1/2"]) == 2
    assert main(["rollout", "inventories/jetsons.py", "--reports", str(tmp_path),
                 "--store", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "same --run-id" in err and "--store is for --shard" in err


def test_etcd_over_tls_with_client_certificates(tmp_path):
    """etcds:// with a CA and a client certificate (etcd --client-cert-auth), both made by
    specdec.config.pki as for a serving group's etcd; without the client certificate the server
    refuses."""
    if shutil.which("etcd") is None:
        pytest.fail("etcd is needed ('make setup' installs it)")
    ca = pki.authority(tmp_path / "ca", "fleet-store")
    node = pki.issue(ca, "node", ["127.0.0.1"], server=True)  # as the frontend member's
    d = ca.directory  # ca.crt, node.crt, node.key
    assert node.cert_pem == (d / "node.crt").read_bytes()
    proc, client = _etcd(
        tmp_path, "https", "--cert-file", str(d / "node.crt"),
        "--key-file", str(d / "node.key"), "--trusted-ca-file", str(d / "ca.crt"),
        "--client-cert-auth")

    try:
        tls = TLSFiles(d / "ca.crt", d / "node.crt", d / "node.key")
        store = open_store(f"etcds://127.0.0.1:{client}", tls)
        deadline = time.monotonic() + 20
        while True:
            try:
                assert store.create("k", "v")
                break
            except RolloutError:
                assert time.monotonic() < deadline, "etcd did not start"
                time.sleep(0.2)
        assert store.get("k") == "v"
        anonymous = open_store(f"etcds://127.0.0.1:{client}", TLSFiles(d / "ca.crt"))
        with pytest.raises(RolloutError, match="failed"):
            anonymous.get("k")
    finally:
        proc.terminate()
        proc.wait(10)
