"""specdec.verify.group: a (Dynamo) serving group kept, disabled or rolled back as one, against
fake members (units, worker health, the frontend's readiness and benchmark)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from specdec.engines.registry import engine
from specdec.errors import BenchError
from specdec.gate.rounds import RoundBench
from specdec.plan.groups import groups_of
from specdec.plan.hostdata import parse_hosts
from specdec.plan.planner import baseline, make_plan
from specdec.render.files import render
from specdec.verify.group import GroupVerifier
from specdec.verify.members import Member
from specdec.verify.spec import FileSpec, VerifySpec
from tests.unit.verify_fakes import FAST, PLAIN, SLOW8, TOKEN, Behaviour, FakeHost

HOSTS = [(f"spark-0{i}", {"specdec_device": "dgx-spark", "specdec_engine": "dynamo",
                          "specdec_model": "Qwen/Qwen3-8B", "ssh_hostname": f"192.0.2.4{i}",
                          "specdec_group": "pair", "specdec_health_timeout": 60})
         for i in (1, 2)]
GROUPS = groups_of(parse_hosts(HOSTS))
PLANS = {n: make_plan(n, d, group=GROUPS[n]) for n, d in HOSTS}
CAND = {n: render(p) for n, p in PLANS.items()}
BASE = {n: render(baseline(p)) for n, p in PLANS.items()}
OLD = "0ld0ld0ld0ld"


class Worker(FakeHost):
    """One member: its worker's system /health instead of an OpenAI API, which only the group's
    members reach (asked on the member itself); from the control node it is firewalled."""

    asked_from_control: int = 0

    def host_get(self, url: str, timeout: float) -> tuple[int, str]:
        if url.endswith("/metrics"):
            return 200, ""
        if url.endswith("/health"):
            return (200, "{}") if not self.stopped and self.beh().health == "ok" else (0, "")
        return 404, ""

    def http_get(self, url: str, timeout: float) -> tuple[int, str]:
        self.asked_from_control += 1
        return 0, ""  # the member's system port refuses the control node


class Front(Worker):
    """The frontend member: also the group's readiness and its benchmark."""

    peers: list[Worker]

    def up(self) -> list[Worker]:
        return [w for w in [self, *self.peers] if not w.stopped and w.beh().health == "ok"]

    def http_get(self, url: str, timeout: float) -> tuple[int, str]:
        if url.endswith("/ready"):
            n = len(self.up())
            body = {"ready": True, "namespaces": {"dynamo": {"worker_types": {
                "aggregated": {"workers": n}}}}}
            return (200, json.dumps(body)) if n else (404, "")
        return super().http_get(url, timeout)

    def bench(self, url: str, model: str, out: Path, run: RoundBench) -> dict[str, Any]:
        every = [self, *self.peers]
        self.benched.append(tuple(w.current for w in every))
        if len(self.up()) < len(every):
            raise BenchError("a worker is down")
        b = self.beh().bench
        out.write_text(json.dumps(b))
        assert isinstance(b, dict)
        return b


def spec(name: str, tmp_path: Path) -> VerifySpec:
    b = BASE[name]
    return VerifySpec(
        plan=PLANS[name], address=PLANS[name].dynamo.address, candidate=CAND[name].release_id,
        desired=CAND[name].release_id, baseline_id=b.release_id,
        baseline_files=tuple(FileSpec(f.path, f.content, f.mode, f.owner, f.group)
                             for f in b.release_files),
        restarted=True, secret_sha256=hashlib.sha256(TOKEN.encode()).hexdigest(),
        work_dir=tmp_path / "bench", run_id="r1", poll_s=1.0)


def group(tmp_path: Path, cand: dict[str, Behaviour], base: Behaviour | None = None
          ) -> tuple[Front, Worker, GroupVerifier]:
    hosts = []
    for cls, name in ((Front, "spark-01"), (Worker, "spark-02")):
        c, b = CAND[name].release_id, BASE[name].release_id
        hosts.append(cls(c, OLD, (c, OLD), {c: cand[name], b: base or Behaviour(bench=PLAIN),
                                            OLD: Behaviour()}))
    front, worker = hosts
    assert isinstance(front, Front)
    front.peers = [worker]
    members = [Member(spec(n, tmp_path), h, h.state())
               for n, h in zip(("spark-01", "spark-02"), hosts, strict=True)]
    return front, worker, GroupVerifier(members)


def test_ready_workers_counts_every_worker_type() -> None:
    body = {"namespaces": {"a": {"worker_types": {"aggregated": {"workers": 2},
                                                  "prefill": {"workers": 1}}}}}
    assert engine("dynamo").ready_workers(json.dumps(body)) == 3
    assert engine("dynamo").ready_workers("not json") == 0


def test_paying_group_is_kept_on_every_member(tmp_path: Path) -> None:
    front, worker, gv = group(tmp_path, {"spark-01": Behaviour(bench=FAST),
                                         "spark-02": Behaviour(bench=FAST)})
    reps = gv.run()
    assert {n: r["outcome"] for n, r in reps.items()} == {"spark-01": "kept",
                                                          "spark-02": "kept"}
    c1, c2 = CAND["spark-01"].release_id, CAND["spark-02"].release_id
    b1, b2 = BASE["spark-01"].release_id, BASE["spark-02"].release_id
    assert front.benched == [(c1, c2), (b1, b2)]  # both members switch together
    assert (front.current, front.last_good, worker.current, worker.last_good) == (c1, c1, c2, c2)
    rep = reps["spark-02"]
    assert rep["group"]["name"] == "pair" and rep["group"]["role"] == "worker"
    assert rep["group"]["url"] == "https://192.0.2.41:8000"  # the API is HTTPS by default
    assert rep["gate"]["decision"] == "keep" and rep["candidate"]["c1"]["throughput_tok_s"]
    assert reps["spark-01"]["group"]["role"] == "etcd, frontend, worker"
    assert not front.armed and not worker.armed


def test_c8_regression_disables_every_member(tmp_path: Path) -> None:
    front, worker, gv = group(tmp_path, {"spark-01": Behaviour(bench=SLOW8),
                                         "spark-02": Behaviour(bench=SLOW8)})
    reps = gv.run()
    assert {r["outcome"] for r in reps.values()} == {"disabled"}
    b2 = BASE["spark-02"].release_id
    assert worker.current == b2 and worker.last_good == b2
    decision = json.loads(worker.files[
        f"/var/lib/specdec/releases/{CAND['spark-02'].release_id}/decision.json"])
    assert decision["active"] == b2 and decision["group"] == "pair"


def test_one_crashing_worker_rolls_the_whole_group_back(tmp_path: Path) -> None:
    front, worker, gv = group(tmp_path, {"spark-01": Behaviour(bench=FAST),
                                         "spark-02": Behaviour(health="crash")})
    reps = gv.run()
    assert {n: r["outcome"] for n, r in reps.items()} == {"spark-01": "rolled_back",
                                                          "spark-02": "rolled_back"}
    assert front.current == OLD and worker.current == OLD  # both back on last-good, serving
    assert front.last_good == OLD and worker.last_good == OLD
    assert front.benched == []
    msg = reps["spark-01"]["message"]
    assert "member spark-02" in msg and "every member rolled back" in msg
    assert reps["spark-01"]["group"]["failed_member"] == "spark-02"
    assert not front.armed and not worker.armed


def test_bench_failure_through_the_frontend_rolls_back(tmp_path: Path) -> None:
    front, worker, gv = group(tmp_path, {"spark-01": Behaviour(bench=FAST),
                                         "spark-02": Behaviour(bench=FAST)})

    def hang(url: str, model: str, out: Path, run: RoundBench) -> dict[str, Any]:
        raise BenchError("no result within 600s (engine hung?)")

    front.bench = hang  # type: ignore[method-assign]
    reps = gv.run()
    assert {r["outcome"] for r in reps.values()} == {"rolled_back"}
    assert "bench" in reps["spark-02"]["message"] and worker.current == OLD
