"""Keep / disable / inconclusive from benchmark results and a `GatePolicy` (seed 000's rule).

Seed 000: keep speculation when, at concurrency 1, ``throughput_tok_s`` is ≥ 30% higher *and*
``tpot_ms_p50`` is ≥ 20% lower; disable it when the gain is < 10% or ``throughput_tok_s``
regresses at concurrency 8. Every rule is judged on a confidence interval, not a point:

* TPOT: the seed's figure, p50(TPOT_cand)/p50(TPOT_base), over per-request TPOTs paired by
  request index and prompt id (same prompts, same order in both arms) and pooled over rounds;
  its CI from a paired hierarchical bootstrap (rounds, then prompts), so per-prompt differences
  in acceptance do not blur it. reduction = 1 − ratio. (The median of per-prompt ratios is
  reported under ``figures``.)
* throughput: the point is mean(run throughput_tok_s, candidate)/mean(…, baseline) over rounds;
  its CI is the wider of (a) a hierarchical paired bootstrap of per-request token rates
  (Σtokens/ΣE2EL; rounds, then pairs), rescaled to that point, and (b) the bootstrap over
  run-level figures when there are several rounds. Without per-request records and with one
  round the CI is the point itself.

A rule *passes* when the whole CI clears its threshold, *fails* when the whole CI is on the
wrong side, and is *unclear* otherwise. Each verdict is a one-sided test at level
``policy.confidence``, so the interval shown is two-sided at 2·confidence − 1 (90% for 0.95).

Decision: ``disable`` when the minimum-gain rule or the concurrency-8 guard fails; ``keep`` when
both keep rules and the guard pass; else ``inconclusive``. `decide_adaptive` adds ABAB rounds while
inconclusive, up to ``policy.max_rounds``, then answers ``disable`` (speculation stays off unless
it proved itself); it stops early with ``disable`` when a keep rule has already failed outright
(the gain is clearly between the disable and keep thresholds: more samples cannot lead to keep).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from specdec.bench.stats import (
    paired_median_ratio_ci,
    paired_rate_ratio_ci,
    paired_ratio_of_medians_ci,
    ratio_of_means_ci,
)
from specdec.errors import GateError
from specdec.plan_types import GatePolicy

__all__ = [
    "Decision",
    "Rule",
    "decide",
    "decide_adaptive",
    "load_policy",
    "load_result",
    "paired_median_ratio_ci",
    "ratio_of_means_ci",
]

MIN_PAIRS = 5
Result = Mapping[str, Any]


@dataclass(frozen=True)
class Rule:
    name: str
    measured: float
    threshold: float
    verdict: str  # pass | fail | unclear
    ci: tuple[float, float]
    comparison: str = ">="  # measured must be >= threshold to pass
    method: str = ""
    n: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "measured": self.measured,
            "threshold": self.threshold,
            "comparison": self.comparison,
            "verdict": self.verdict,
            "ci": [self.ci[0], self.ci[1]],
            "method": self.method,
            "n": self.n,
        }


@dataclass(frozen=True)
class Decision:
    decision: str  # keep | disable | inconclusive
    rules: list[Rule]
    reason: str
    policy: dict[str, Any] = field(default_factory=dict)
    rounds: int = 1
    conservative: bool = False  # True: inconclusive at the budget, answered disable
    keep_possible: bool = True  # False: a keep rule failed outright; more rounds cannot keep
    figures: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "reason": self.reason,
            "rules": [r.to_dict() for r in self.rules],
            "rounds": self.rounds,
            "conservative": self.conservative,
            "keep_possible": self.keep_possible,
            "figures": self.figures,
            "policy": self.policy,
            "warnings": self.warnings,
            "ci_level": 2.0 * float(self.policy.get("confidence", 0.95)) - 1.0,
        }


# -- input ------------------------------------------------------------------------------------
def load_policy(path: str | Path | None) -> GatePolicy:
    """GatePolicy from a YAML/JSON mapping of its fields (None: seed 000's defaults)."""
    if path is None:
        return GatePolicy()
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise GateError(f"policy {path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise GateError(f"policy {path}: not valid YAML/JSON: "
                        f"{str(exc).splitlines()[0] if str(exc) else exc!r}") from None
    if not isinstance(data, dict):
        raise GateError(f"policy {path}: expected a mapping of GatePolicy fields")
    fields = {f.name: f for f in dataclasses.fields(GatePolicy)}
    for key, value in data.items():
        if key not in fields:
            raise GateError(f"policy {path}: unknown field {key!r} "
                            f"(known: {', '.join(sorted(fields))})")
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise GateError(f"policy {path}: field {key!r} must be a number, got {value!r}")
        if fields[key].type in (int, "int") and not float(value).is_integer():
            raise GateError(f"policy {path}: field {key!r} must be an integer, got {value!r}")
    kw: dict[str, Any] = {k: (int(v) if fields[k].type in (int, "int") else float(v))
                          for k, v in data.items()}
    pol = GatePolicy(**kw)
    _check_policy(pol, str(path))
    return pol


def _check_policy(pol: GatePolicy, where: str) -> None:
    if not 0.5 <= pol.confidence < 1.0:
        raise GateError(f"policy {where}: field 'confidence' must be in [0.5, 1), "
                        f"got {pol.confidence}")
    if pol.max_rounds < 1:
        raise GateError(f"policy {where}: field 'max_rounds' must be >= 1, got {pol.max_rounds}")
    if pol.keep_concurrency < 1 or pol.guard_concurrency < 1:
        raise GateError(f"policy {where}: concurrency levels must be >= 1")


def _check_result(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise GateError(f"{where}: expected a bench result object")
    levels = data.get("concurrency")
    if not isinstance(levels, dict) or not levels:
        raise GateError(f"{where}: missing field 'concurrency' (not a specdec bench result?)")
    for name, lvl in levels.items():
        if not isinstance(lvl, dict):
            raise GateError(f"{where}: field concurrency.{name} must be an object")
        for key in ("throughput_tok_s", "tpot_ms_p50"):
            v = lvl.get(key)
            if v is not None and (not isinstance(v, int | float) or isinstance(v, bool)):
                raise GateError(f"{where}: field concurrency.{name}.{key} must be a number, "
                                f"got {v!r}")
        reqs = lvl.get("requests")
        if reqs is not None and (not isinstance(reqs, list)
                                 or not all(isinstance(r, dict) for r in reqs)):
            raise GateError(f"{where}: field concurrency.{name}.requests must be a list of "
                            "objects")
    return data


def load_result(path: str | Path) -> dict[str, Any] | list[dict[str, Any]]:
    """A bench result (object) or several rounds of one arm (a list of results)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise GateError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise GateError(f"{path}: not valid JSON ({str(exc).splitlines()[0]})") from None
    if isinstance(data, list):
        if not data:
            raise GateError(f"{path}: empty list of results")
        return [_check_result(d, f"{path}[{i}]") for i, d in enumerate(data)]
    return _check_result(data, str(path))


# -- measurement helpers ----------------------------------------------------------------------
def _level(result: Result, conc: int, what: str) -> Mapping[str, Any]:
    levels = result.get("concurrency")
    if not isinstance(levels, Mapping) or not isinstance(levels.get(str(conc)), Mapping):
        raise GateError(f"{what}: missing field concurrency.{conc}")
    lvl: Mapping[str, Any] = levels[str(conc)]
    return lvl


def _number(lvl: Mapping[str, Any], key: str, what: str, conc: int) -> float:
    v = lvl.get(key)
    if not isinstance(v, int | float) or isinstance(v, bool) or v != v:
        raise GateError(f"{what}: field concurrency.{conc}.{key} must be a number, got {v!r}")
    return float(v)


def _num(x: Any) -> float | None:
    if isinstance(x, int | float) and not isinstance(x, bool) and x == x and x > 0:
        return float(x)
    return None


def _pair_key(r: Mapping[str, Any], i: int) -> tuple[Any, Any]:
    return (r.get("index", i), r.get("prompt_id"))


def _pairs(base: Sequence[Mapping[str, Any]], cand: Sequence[Mapping[str, Any]]
           ) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    bmap = {_pair_key(r, i): r for i, r in enumerate(base) if r.get("error") is None}
    out = []
    for i, r in enumerate(cand):
        b = bmap.get(_pair_key(r, i))
        if b is not None and r.get("error") is None:
            out.append((b, r))
    return out


def _requests(result: Result, conc: int, what: str) -> list[Mapping[str, Any]]:
    reqs = _level(result, conc, what).get("requests") or []
    return [r for r in reqs if isinstance(r, Mapping)]


def _verdict(lo: float, hi: float, thr: float) -> str:
    return "pass" if lo >= thr else "fail" if hi < thr else "unclear"


def _throughput(bases: Sequence[Result], cands: Sequence[Result], conc: int,
                conf: float) -> tuple[float, float, float, str, int]:
    """(ratio, lo, hi, method, n) of throughput_tok_s candidate/baseline at ``conc``."""
    tb = [_number(_level(r, conc, "baseline"), "throughput_tok_s", "baseline", conc)
          for r in bases]
    tc = [_number(_level(r, conc, "candidate"), "throughput_tok_s", "candidate", conc)
          for r in cands]
    if min(tb) <= 0:
        raise GateError(f"baseline: field concurrency.{conc}.throughput_tok_s must be positive")
    point, lo, hi = ratio_of_means_ci(tb, tc, conf)
    methods = [f"runs({len(tb)}+{len(tc)})"]
    rounds = []
    for rb, rc in zip(bases, cands, strict=False):
        pr = []
        for b, c in _pairs(_requests(rb, conc, "baseline"), _requests(rc, conc, "candidate")):
            bt, bs = _num(b.get("output_tokens")), _num(b.get("e2el_ms"))
            ct, cs = _num(c.get("output_tokens")), _num(c.get("e2el_ms"))
            if bt and bs and ct and cs:
                pr.append((bt, bs, ct, cs))
        if pr:
            rounds.append(pr)
    n = sum(len(r) for r in rounds)
    if n >= MIN_PAIRS:
        pp, plo, phi = paired_rate_ratio_ci(rounds, conf)
        lo = min(lo, point * plo / pp)
        hi = max(hi, point * phi / pp)
        methods.append(f"paired-requests({n})")
    return point, lo, hi, "+".join(methods), n


def _tpot(bases: Sequence[Result], cands: Sequence[Result], conc: int,
          conf: float) -> tuple[float, float, float, str, int, float | None]:
    """(ratio, lo, hi, method, n, median per-prompt ratio) of TPOT p50 candidate/baseline."""
    rounds: list[list[tuple[float, float]]] = []
    for rb, rc in zip(bases, cands, strict=False):
        pr = []
        for b, c in _pairs(_requests(rb, conc, "baseline"), _requests(rc, conc, "candidate")):
            tb, tc = _num(b.get("tpot_ms")), _num(c.get("tpot_ms"))
            if tb and tc:
                pr.append((tb, tc))
        if pr:
            rounds.append(pr)
    n = sum(len(r) for r in rounds)
    if n >= MIN_PAIRS:
        r, lo, hi = paired_ratio_of_medians_ci(rounds, conf)
        flat = [x for rr in rounds for x in rr]
        per_prompt = paired_median_ratio_ci([b for b, _ in flat], [c for _, c in flat], conf)[0]
        return r, lo, hi, f"paired-p50-ratio({n})", n, per_prompt
    p50b = [_number(_level(x, conc, "baseline"), "tpot_ms_p50", "baseline", conc) for x in bases]
    p50c = [_number(_level(x, conc, "candidate"), "tpot_ms_p50", "candidate", conc)
            for x in cands]
    if min(p50b) <= 0:
        raise GateError(f"baseline: field concurrency.{conc}.tpot_ms_p50 must be positive")
    r, lo, hi = ratio_of_means_ci(p50b, p50c, conf)
    return r, lo, hi, f"p50-runs({len(p50b)}+{len(p50c)})", 0, None


def _same_setup(bases: Sequence[Result], cands: Sequence[Result]) -> list[str]:
    """Refuse arms measured differently; return warnings for softer differences."""
    warnings: list[str] = []

    def conf(r: Result) -> Mapping[str, Any]:
        c = r.get("config")
        return c if isinstance(c, Mapping) else {}

    for key in ("max_tokens", "endpoint"):
        vals = {json.dumps(conf(r).get(key)) for r in [*bases, *cands]}
        if len(vals) > 1:
            raise GateError(f"baseline and candidate were measured with different {key} "
                            f"({', '.join(sorted(vals))}); rerun with the same settings")
    for key in ("requests", "prompts"):
        b = {json.dumps(r.get(key) if key == "prompts" else conf(r).get(key)) for r in bases}
        c = {json.dumps(r.get(key) if key == "prompts" else conf(r).get(key)) for r in cands}
        if b != c:
            warnings.append(f"baseline and candidate differ in {key}")
    for r in [*bases, *cands]:
        for w in r.get("warnings") or []:
            warnings.append(f"bench: {w}")
    return warnings


def _as_list(x: Result | Sequence[Result], what: str) -> list[Result]:
    out = [x] if isinstance(x, Mapping) else list(x)
    if not out:
        raise GateError(f"{what}: need at least one result")
    return out


# -- the decision -----------------------------------------------------------------------------
def decide(
    baseline: Result | Sequence[Result],
    candidate: Result | Sequence[Result],
    policy: GatePolicy | None = None,
) -> Decision:
    """Decide from one or several rounds (ABAB runs) of benchmark results per arm."""
    pol = policy or GatePolicy()
    _check_policy(pol, "(given)")
    bases = _as_list(baseline, "baseline")
    cands = _as_list(candidate, "candidate")
    for i, r in enumerate([*bases, *cands]):
        _check_result(dict(r), f"result {i}")
    warnings = _same_setup(bases, cands)
    k1, k8 = pol.keep_concurrency, pol.guard_concurrency
    # Each rule is a one-sided test at level `confidence`: the CI reported is two-sided at
    # 2·confidence − 1 (0.95 → a 90% interval whose bounds are 95% one-sided bounds).
    conf = 2.0 * pol.confidence - 1.0

    g, glo, ghi, gmeth, gn = _throughput(bases, cands, k1, conf)
    gain, gain_lo, gain_hi = g - 1.0, glo - 1.0, ghi - 1.0
    t, tlo, thi, tmeth, tn, per_prompt = _tpot(bases, cands, k1, conf)
    red, red_lo, red_hi = 1.0 - t, 1.0 - thi, 1.0 - tlo

    rules = [
        Rule(f"throughput_gain_c{k1}", gain, pol.keep_min_throughput_gain,
             _verdict(gain_lo, gain_hi, pol.keep_min_throughput_gain), (gain_lo, gain_hi),
             method=gmeth, n=gn),
        Rule(f"tpot_p50_reduction_c{k1}", red, pol.keep_min_tpot_reduction,
             _verdict(red_lo, red_hi, pol.keep_min_tpot_reduction), (red_lo, red_hi),
             method=tmeth, n=tn),
        Rule(f"min_gain_c{k1}", gain, pol.disable_below_gain,
             _verdict(gain_lo, gain_hi, pol.disable_below_gain), (gain_lo, gain_hi),
             method=gmeth, n=gn),
    ]
    figures: dict[str, Any] = {
        f"throughput_ratio_c{k1}": g, f"tpot_p50_ratio_c{k1}": t,
        f"tpot_median_per_prompt_ratio_c{k1}": per_prompt,
        "baseline_throughput_tok_s": {str(k1): [
            _number(_level(r, k1, "baseline"), "throughput_tok_s", "baseline", k1)
            for r in bases]},
        "candidate_throughput_tok_s": {str(k1): [
            _number(_level(r, k1, "candidate"), "throughput_tok_s", "candidate", k1)
            for r in cands]},
    }
    has_guard = all(isinstance((r.get("concurrency") or {}).get(str(k8)), Mapping)
                    for r in [*bases, *cands])
    guard_v = "unclear"
    if has_guard and k8 != k1:
        r8, r8lo, r8hi, m8, n8 = _throughput(bases, cands, k8, conf)
        thr8 = -pol.max_regression_c8
        guard_v = _verdict(r8lo - 1.0, r8hi - 1.0, thr8)
        rules.append(Rule(f"no_regression_c{k8}", r8 - 1.0, thr8, guard_v,
                          (r8lo - 1.0, r8hi - 1.0), method=m8, n=n8))
        figures[f"throughput_ratio_c{k8}"] = r8
    else:
        warnings.append(f"no concurrency {k8} level in both arms: the regression guard cannot "
                        "pass, so the result cannot be keep")
    v = {r.name: r.verdict for r in rules}
    if v[f"min_gain_c{k1}"] == "fail":
        dec = "disable"
        reason = (f"c={k1} throughput gain {gain:+.1%} (CI {gain_lo:+.1%}..{gain_hi:+.1%}) is "
                  f"below {pol.disable_below_gain:.0%}")
    elif guard_v == "fail":
        dec = "disable"
        reason = f"c={k8} throughput regresses ({rules[-1].measured:+.1%}, CI " \
                 f"{rules[-1].ci[0]:+.1%}..{rules[-1].ci[1]:+.1%})"
    elif (v[f"throughput_gain_c{k1}"] == "pass" and v[f"tpot_p50_reduction_c{k1}"] == "pass"
          and guard_v == "pass"):
        dec = "keep"
        reason = (f"c={k1} throughput {gain:+.1%} and TPOT p50 {-red:+.1%} clear the keep "
                  f"thresholds at the {pol.confidence:.0%} one-sided bound; c={k8} does not "
                  "regress")
    else:
        dec = "inconclusive"
        unclear = [f"{r.name} ({r.verdict})" for r in rules if r.verdict != "pass"]
        reason = "not decisive: " + ", ".join(unclear)
    keep_possible = dec == "keep" or (
        v[f"throughput_gain_c{k1}"] != "fail" and v[f"tpot_p50_reduction_c{k1}"] != "fail"
        and guard_v != "fail" and (has_guard and k8 != k1))
    return Decision(dec, rules, reason, pol.to_dict(), rounds=min(len(bases), len(cands)),
                    figures=figures, warnings=warnings, keep_possible=keep_possible)


def decide_adaptive(
    run_round: Callable[[str, int], Mapping[str, Any]],
    policy: GatePolicy | None = None,
    on_round: Callable[[Decision], None] | None = None,
) -> Decision:
    """ABAB rounds: ``run_round(arm, i)`` runs one benchmark of arm ``baseline``/``candidate``.

    Adds rounds while the decision is inconclusive, up to ``policy.max_rounds``; still
    inconclusive then means ``disable`` (conservative, ``Decision.conservative`` True).
    """
    pol = policy or GatePolicy()
    _check_policy(pol, "(given)")
    bases: list[Mapping[str, Any]] = []
    cands: list[Mapping[str, Any]] = []
    dec: Decision | None = None
    for i in range(pol.max_rounds):
        bases.append(run_round("baseline", i))
        cands.append(run_round("candidate", i))
        dec = decide(bases, cands, pol)
        if on_round is not None:
            on_round(dec)
        if dec.decision != "inconclusive":
            return dec
        if not dec.keep_possible:
            return dataclasses.replace(
                dec, decision="disable", conservative=True,
                reason=f"keep is out of reach after {len(bases)} round(s) (a keep rule failed "
                       f"at the CI bound); conservative answer: {dec.reason}")
    assert dec is not None
    return dataclasses.replace(
        dec, decision="disable", conservative=True,
        reason=f"still inconclusive after {len(bases)} round(s) (budget {pol.max_rounds}); "
               f"conservative answer: {dec.reason}")
