"""A fake host for the verify tests: a release at a time, its unit, HTTP, bench and /proc; the
plan, releases and canned bench results they share (`tests/unit/test_verify_*.py`, the Dynamo
group and deploy tests)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec.errors import BenchError
from specdec.gate.rounds import RoundBench
from specdec.host import release
from specdec.plan.planner import baseline, make_plan
from specdec.render.files import render
from specdec.verify.spec import FileSpec, Roofline, VerifySpec
from specdec.verify.verifier import Verifier

TOKEN = "hf_MARKERtoken123"
PLAN = make_plan("orin-1", {"specdec_device": "agx-orin-64gb",
                            "specdec_model": "meta-llama/Llama-3.1-8B-Instruct",
                            "specdec_num_speculative_tokens": 3,  # pinned: no tune phase
                            "specdec_health_timeout": 60}, None)
CAND = render(PLAN)
BASE = render(baseline(PLAN))
C, B, OLD = CAND.release_id, BASE.release_id, "0ld0ld0ld0ld"


def result(thr1: float, tpot1: float, thr8: float, n: int = 30,
           spec: dict[str, Any] | None = None) -> dict[str, Any]:
    reqs = [{"prompt_id": f"p{i}", "tpot_ms": tpot1 * (1 + 0.01 * (i % 3)), "error": None}
            for i in range(n)]
    return {"concurrency": {
        "1": {"throughput_tok_s": thr1, "tpot_ms_p50": tpot1, "requests": reqs},
        "8": {"throughput_tok_s": thr8, "tpot_ms_p50": tpot1 * 2, "requests": []},
    }, "spec_decode": spec}


FAST = result(40.0, 25.0, 160.0, spec={"acceptance_length": 2.4, "acceptance_rate": 0.47,
                                       "per_position": [0.7, 0.45, 0.25], "drafts": 100})
SLOW8 = result(40.0, 25.0, 60.0)
PLAIN = result(20.0, 50.0, 100.0)


@dataclass
class Behaviour:
    health: str = "ok"  # ok | crash | oom | never
    bench: dict[str, Any] | str = field(default_factory=lambda: PLAIN)  # result or "hang"
    memlock: str = "unlimited"
    argv: tuple[str, ...] = ("vllm", "serve", "m")


class FakeHost:
    """A host running one release at a time; facts of its unit, HTTP and bench."""

    def __init__(self, current: str | None, last_good: str | None, releases: tuple[str, ...],
                 behaviour: dict[str, Behaviour]) -> None:
        self.current = current
        self.last_good = last_good
        self.releases = set(releases)
        self.behaviour = behaviour
        self.commands: list[str] = []
        self.files: dict[str, str] = {}
        self.clock = 0.0
        self.restarts = 0
        self.stopped = False
        self.benched: list[str] = []
        self.offsets: list[int] = []
        self.guard: list[tuple[Any, ...]] = []  # ("arm", release, seconds) | ("disarm",)
        self.guard_reverted: str | None = None  # set: the host's guard already reverted

    @property
    def armed(self) -> bool:
        return bool(self.guard) and self.guard[-1][0] == "arm"

    def state(self) -> release.ReleaseState:
        return release.ReleaseState(self.current, self.last_good, tuple(sorted(self.releases)))

    def beh(self) -> Behaviour:
        return self.behaviour.get(self.current or "", Behaviour(health="never"))

    # HostIO
    def run(self, command: str, timeout: float | None = None) -> tuple[bool, list[str]]:
        self.commands.append(command)
        if command.startswith("flock ") and "last-good" in command and self.guard_reverted:
            return False, [f"current is releases/{self.current}, not {self.guard_reverted}: "
                           f"deadline: reverted {self.guard_reverted} to last-good"]
        if m := re.search(r"release=(\S+) deadline=(\d+)s", command):
            self.guard.append(("arm", m.group(1), int(m.group(2))))
        if "rm -f pending" in command or "rm -f /var/lib/specdec/pending" in command:
            self.guard.append(("disarm",))
        if m := re.search(r"ln -sfn releases/(\S+) \S+/current\.activate\.tmp", command):
            if m.group(1) not in self.releases:
                return False, []
            self.current = m.group(1)
            self.restarts = 0
            self.stopped = False
        if m := re.search(r"ln -sfn releases/(\S+) \S+/last-good\.\w+\.tmp", command):
            self.last_good = m.group(1)
        if "base64 -d" in command:
            path = re.findall(r"mv -f \S+ (\S+)$", command)[0]
            data = re.findall(r"printf '%s' (\S+) \| base64", command)[0].strip("'")
            import base64

            self.files[path] = base64.b64decode(data).decode()
            rid = path.split("/releases/")[1].split("/")[0]
            self.releases.add(rid)
        if command.startswith("systemctl show"):
            h = self.beh().health
            if self.stopped:
                return True, ["ActiveState=inactive", "SubState=dead", "Result=success"]
            if h in ("crash", "oom"):
                self.restarts += 1
                return True, ["ActiveState=activating", "SubState=auto-restart",
                              "Result=exit-code", f"NRestarts={self.restarts}", "MainPID=0"]
            return True, ["ActiveState=active", "SubState=running", "Result=success",
                          "NRestarts=0", "MainPID=4242"]
        if command.startswith("journalctl"):
            if self.beh().health == "oom":
                return True, ["loading weights", "torch.OutOfMemoryError: CUDA out of memory."]
            return True, ["Traceback (most recent call last):", "RuntimeError: engine died"]
        if "Max locked memory" in command:
            b = self.beh()
            out = ["@@pid 4242",
                   f"Max locked memory         {b.memlock}            {b.memlock}   bytes",
                   "@@argv"]
            out += sorted({hashlib.sha256(a.encode()).hexdigest() for a in b.argv})
            out += ["@@environ"]
            return True, out
        if command.startswith("systemctl stop"):
            self.stopped = True
        return True, []

    def http_get(self, url: str, timeout: float) -> tuple[int, str]:
        if self.stopped or self.beh().health != "ok":
            return 0, ""
        if url.endswith("/health"):
            return 200, ""
        return 200, json.dumps({"data": [{"id": PLAN.served_model_name}]})

    def host_get(self, url: str, timeout: float) -> tuple[int, str]:
        return self.http_get(url, timeout)

    def bench(self, url: str, model: str, out: Path, run: RoundBench) -> dict[str, Any]:
        assert self.current is not None
        self.offsets.append(run.offsets[0])
        self.benched.append(self.current)
        b = self.beh().bench
        if isinstance(b, str):
            raise BenchError("no result within 600s (engine hung?)")
        out.write_text(json.dumps(b))
        return b

    def sleep(self, seconds: float) -> None:
        self.clock += seconds

    def monotonic(self) -> float:
        return self.clock


def spec(tmp_path: Path, **kw: Any) -> VerifySpec:
    base: dict[str, Any] = dict(
        plan=PLAN, address="10.0.0.5", candidate=C, desired=C, baseline_id=B,
        baseline_files=tuple(FileSpec(f.path, f.content, f.mode, f.owner, f.group)
                             for f in BASE.release_files),
        restarted=True, secret_sha256=hashlib.sha256(TOKEN.encode()).hexdigest(),
        cache_dir=tmp_path / "cache", work_dir=tmp_path / "bench",
        roofline=Roofline(204.8, 8 * 10**9), run_id="r1")
    base.update(kw)
    return VerifySpec(**base)


def run(host: FakeHost, sp: VerifySpec) -> dict[str, Any]:
    return Verifier(sp, host).run(host.state())
