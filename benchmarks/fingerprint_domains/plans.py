"""Plans (with baselines, tune-cache application and `speculating`), renders, inventories."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fingerprint_domains.adapters import (
    LAB_ENV,
    aux_units,
    check_group_plans,
    dynamo_groups,
    lab_inventory_pinned,
)
from fingerprint_domains.common import Domain, error, line

ENGINES = ("vllm", "trtllm", "dynamo")
RUNTIMES = ("docker", "native")
METHODS = (None, "none", "eagle3", "eagle", "draft_model", "ngram", "ngram_gpu", "mtp",
           "medusa", "mlp_speculator", "suffix", "dflash")  # None: not pinned
KS = (None, 1, 4, 8)  # None: auto
CUSTOM = {"specdec_model": "example-org/Custom-7B", "specdec_model_params_b": 7.0}
VERSIONS = {"vllm": ("0.9.2", "0.11.0", "0.14.0", "0.19.0", "0.24.0", "0.31.0", "9.9.9"),
            "trtllm": ("1.2.0rc6", "1.2.1", "1.3.0rc13", "1.0.0"),
            "dynamo": ("1.6.1", "1.5.0")}
COMMON_VARIANTS: tuple[dict[str, Any], ...] = (
    {"specdec_gpu_memory_utilization": 0.5}, {"specdec_gpu_memory_utilization": 0.9},
    {"specdec_max_model_len": 1024}, {"specdec_max_model_len": 16384},
    {"specdec_max_num_seqs": 1}, {"specdec_max_num_seqs": 16},
    {"specdec_gate": {"keep_min_throughput_gain": 0.2, "max_rounds": 6}},
    {"specdec_gate": {"indifference": 0.07, "run_noise": 0.02, "confidence": 0.9}},
    {"specdec_gate": {"bogus_rule": 1}},
    {"_identity": "same"}, {"_identity": "only"}, {"_identity": "other"},
    {"specdec_port": 8123, "specdec_memlock": "8388608", "specdec_extra_args": ["--seed", "3"],
     "specdec_env": {"SPECDEC_EMU_FAULT": "oom", "A_B": "c d"}, "specdec_health_timeout": 60},
    {"specdec_draft": "Qwen/Qwen3-0.6B"}, {"specdec_draft": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
    {"specdec_jetson_tuning": False, "specdec_verify": False, "specdec_bench_mode": "control"},
    {"specdec_model_weight_gib": 3.5, "specdec_model_kv_bytes_per_token": 65536},
)


def _catalog() -> Any:
    from specdec.catalog import load_catalog

    return load_catalog()


def _variants(engine: str, runtime: str) -> list[dict[str, Any]]:
    out = list(COMMON_VARIANTS)
    if runtime == "docker":
        refs = sorted(i.ref for i in _catalog().images.values() if i.engine == engine)
        out += [{"specdec_image": r} for r in refs]
        out += [{"specdec_image": "registry.example:5000/" + r.split("/", 1)[1]} for r in refs]
        out += [{"specdec_image": f"example.org/team/{engine}:custom",
                 "specdec_engine_version": v} for v in VERSIONS[engine]]
        out += [{"specdec_image": f"example.org/team/{engine}:custom@sha256:" + "ab" * 32},
                {"specdec_image": f"example.org/team/{engine}:latest"}]
    else:
        out += [{"specdec_engine_version": v} for v in VERSIONS[engine]]
        out += [{"_installed": {engine: v}} for v in VERSIONS[engine][:2]]
        out += [{"_installed": {}}, {"specdec_image": "example.org/x:1.0"}]
    return out


def plan_cases(quick: bool) -> list[tuple[str, dict[str, Any]]]:
    """(case id, host data with ``_identity`` / ``_installed`` markers): the cross product of
    device, engine, runtime, model, method, k; each case once plain and once with one variant
    (pins, identity, image or release) chosen by a hash of the case id."""
    cat = _catalog()
    models = [*sorted(cat.models), CUSTOM["specdec_model"]]
    cases: list[tuple[str, dict[str, Any]]] = []
    for dev in sorted(cat.devices):
        for engine in ENGINES:
            supported = engine in cat.devices[dev].engines
            for runtime in RUNTIMES:
                variants = _variants(engine, runtime)
                for mi, model in enumerate(models):
                    for method in METHODS:
                        for k in KS:
                            if not supported and (mi or method or k):
                                continue  # an unsupported engine: one case per runtime
                            data: dict[str, Any] = {
                                "specdec_device": dev, "specdec_engine": engine,
                                "specdec_runtime": runtime, "specdec_model": model}
                            if model == CUSTOM["specdec_model"]:
                                data.update(CUSTOM)
                            if method is not None:
                                data["specdec_method"] = method
                            if k is not None:
                                data["specdec_num_speculative_tokens"] = k
                            key = f"{dev}|{engine}|{runtime}|{model}|{method or '-'}|{k or 'auto'}"
                            h = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
                            var = variants[h % len(variants)]
                            for tag, extra in (("", {}), ("+" + json.dumps(var, sort_keys=True),
                                                          var)):
                                cases.append((key + tag, {**data, **extra}))
    return cases[::9] if quick else cases


def _identity(dev: str, how: str) -> Any:
    from specdec.host.identify import Identity

    cat = _catalog()
    if how == "other":
        dev = "dgx-spark" if dev != "dgx-spark" else "agx-orin-64gb"
    d = cat.devices[dev]
    return Identity(device=dev, model_string=d.model_string, module_id=None,
                    l4t="36.4.3" if d.is_jetson else None, memory_gib=d.memtotal_gib,
                    arch="aarch64", gpu_name=None if d.is_jetson else "NVIDIA GB10")


def _members(data: dict[str, Any]) -> list[tuple[str, Any]]:
    """The host's plans: one host, or both members of a generated Dynamo pair."""
    from specdec.plan.planner import make_plan

    data = dict(data)
    ident = data.pop("_identity", None)
    installed = data.pop("_installed", None)
    identity = _identity(data["specdec_device"], ident) if ident else None
    if ident == "only":
        del data["specdec_device"]
    kw = {"identity": identity, "catalog": _catalog(), "installed": installed}
    if data.get("specdec_engine") != "dynamo":
        return [("h", make_plan("h", data, **kw))]
    hosts = [("h", {**data, "ssh_hostname": "192.0.2.41", "specdec_group": "pair"}),
             ("h2", {**data, "ssh_hostname": "192.0.2.42", "specdec_group": "pair"})]
    groups = dynamo_groups(hosts)
    plans = [(n, make_plan(n, d, group=groups[n], **kw)) for n, d in hosts]
    check_group_plans([p for _, p in plans])
    return plans


def _diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The top-level keys of plan dict ``b`` that differ from ``a`` ("<absent>" if dropped)."""
    return {k: b.get(k, "<absent>") for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def _plan_record(p: Any, ref: dict[str, Any] | None = None) -> dict[str, Any]:
    """The plan's JSON (as a diff against ``ref`` when given), its release id and, when it
    speculates, its baseline (as a diff against the plan)."""
    from specdec.plan.planner import baseline

    d = json.loads(p.to_json())
    rec: dict[str, Any] = {"plan" if ref is None else "plan_diff": d if ref is None
                           else _diff(ref, d), "release_id": p.release_id()}
    if p.speculative:
        try:
            b = baseline(p)
            rec["baseline_diff"] = _diff(d, json.loads(b.to_json()))
            rec["baseline_release_id"] = b.release_id()
        except Exception as exc:
            rec["baseline"] = error(exc)
    return rec


def _render_record(p: Any) -> dict[str, Any]:
    from specdec.render.files import engine_argv, render, speculative_config

    out: dict[str, Any] = {}
    try:
        r = render(p)
        out["release_id"] = r.release_id
        out["files"] = [{"path": f.path, "mode": f.mode, "owner": f.owner, "group": f.group,
                         "content": f.content} for f in r.files]
    except Exception as exc:
        return error(exc)
    for name, fn in (("argv", lambda: engine_argv(p, "ENGINE_YAML") if p.engine == "trtllm"
                      else engine_argv(p)),
                     ("speculative_config", lambda: speculative_config(p))):
        try:
            out[name] = fn()
        except Exception as exc:
            out[name] = error(exc)
    if p.dynamo is not None:
        out["aux_units"] = aux_units(p)
    return out


def _baseline_render(p: Any) -> dict[str, Any]:
    from specdec.plan.planner import baseline

    try:
        b = baseline(p)
    except Exception as exc:
        return error(exc)
    return _render_record(b)


def _tune_lines(key: str, i: int, p: Any, root: Path) -> list[tuple[str, tuple[str, bool]]]:
    """Tune-cache application (an entry stored for the plan's key) and `speculating`, each as
    a diff against the plan."""
    from specdec.plan.planner import speculating
    from specdec.tune.cache import apply_cached, store
    from specdec.tune.search import Config, TuneResult, schedule

    out: list[tuple[str, tuple[str, bool]]] = []
    ref = json.loads(p.to_json())
    methods = list(p.tune_methods) or [(p.method, p.draft)]
    m, d = methods[i % len(methods)]
    k = 1 + i % 8
    sched = schedule(k, (k + 3) % 9, p.max_num_seqs) if i % 2 == 0 else ()
    try:
        store(root, p, TuneResult(Config(m, d, k, sched), [], [], "fingerprint", 12.5), {})
        tuned = apply_cached(p, root, False)
        rec = {"tuned": _plan_record(tuned, ref),
               "reverify_unchanged": apply_cached(p, root, True) == p}
        out.append(("plans", line(key + "#tunecache", rec)))
        if tuned is not p:
            out.append(("renders", line(key + "#tunecache", _render_record(tuned))))
    except Exception as exc:
        out.append(("plans", line(key + "#tunecache", error(exc))))
    if i % 8:
        return out
    for mm, dd in (methods[-1], ("ngram", None)):
        for kk, kb in ((1, ()), (8, schedule(8, 0, p.max_num_seqs))):
            ck = f"{key}#speculating:{mm}:{dd}:{kk}:{kb}"
            try:
                s = speculating(p, mm, dd, kk, kb)
                out.append(("plans", line(ck, {"plan_diff": _diff(ref, json.loads(s.to_json())),
                                               "release_id": s.release_id()})))
            except Exception as exc:
                out.append(("plans", line(ck, error(exc))))
    return out


def run_chunk(chunk: Sequence[tuple[int, str, dict[str, Any]]]
              ) -> list[tuple[str, tuple[str, bool]]]:
    """Worker: each case's plan lines and render lines, in case order."""
    root = Path(tempfile.mkdtemp(prefix="fp-tune-"))
    out: list[tuple[str, tuple[str, bool]]] = []
    try:
        for i, key, data in chunk:
            try:
                members = _members(data)
            except Exception as exc:
                out.append(("plans", line(key, error(exc))))
                continue
            out.append(("plans", line(key, {n: _plan_record(p) for n, p in members})))
            for n, p in members:
                suffix = "" if n == "h" else "@" + n
                out.append(("renders", line(key + suffix, _render_record(p))))
                if p.speculative:
                    out.append(("renders", line(key + suffix + "#baseline", _baseline_render(p))))
            if i % 3 == 0:
                out += _tune_lines(key, i, members[0][1], root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


# -- inventories --------------------------------------------------------------------------------
def _cli(argv: list[str]) -> dict[str, Any]:
    from specdec.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return {"exit": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def _tree(root: Path) -> list[dict[str, Any]]:
    return [{"path": p.relative_to(root).as_posix(), "mode": oct(p.stat().st_mode & 0o7777),
             "content": p.read_text()} for p in sorted(root.rglob("*")) if p.is_file()]


def inventories(dom: Domain, repo: Path) -> None:
    """`specdec plan INV [--json]` for the example inventories (the lab's in two environments),
    `specdec render` for every host of the lab inventory: the tree written, the printed paths
    relative to it. (Each call loads the inventory in a child process: about a second.)"""
    reports = Path(tempfile.mkdtemp(prefix="fp-reports-"))  # an empty tune cache
    lab = str(repo / "inventories" / "lab.py")
    faults = {**LAB_ENV, "SPECDEC_LAB_HOSTS": "4", "SPECDEC_LAB_TIME_SCALE": "0.5",
              "SPECDEC_LAB_FAULTS": "lab-nano=crash_at_start,lab-dyn2=oom"}
    try:
        with lab_inventory_pinned({"SPECDEC_REPORTS_DIR": str(reports)}):
            for inv in ("jetsons", "spark"):
                path = str(repo / "inventories" / f"{inv}.py")
                for extra in (["--json"], []):
                    dom.add(f"plan {inv} {' '.join(extra)}", _cli(["plan", path, *extra]))
            with lab_inventory_pinned(faults):
                for extra in (["--json"], []):
                    dom.add(f"plan lab-4-faults {' '.join(extra)}", _cli(["plan", lab, *extra]))
            with lab_inventory_pinned(LAB_ENV):
                first = _cli(["plan", lab, "--json"])
                dom.add("plan lab --json", first)
                for extra in ([], ["--limit", "lab-dyn2"], ["--limit", "lab-agx,lab-nx"]):
                    dom.add(f"plan lab {' '.join(extra)}", _cli(["plan", lab, *extra]))
                for host in sorted(h["host"] for h in json.loads(first["stdout"] or "[]")):
                    out = Path(tempfile.mkdtemp(prefix="fp-render-"))
                    try:
                        res = _cli(["render", lab, "--host", host, "--out", str(out)])
                        res["stdout"] = res["stdout"].replace(str(out), "<OUT>")
                        dom.add(f"render lab {host}", {**res, "tree": _tree(out)})
                    finally:
                        shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(reports, ignore_errors=True)
