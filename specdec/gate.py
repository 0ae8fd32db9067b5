"""Keep / disable / inconclusive from benchmark results and a `GatePolicy` (seed 000's rule).

Seed 000: keep speculation when, at concurrency 1, ``throughput_tok_s`` is ≥ 30% higher *and*
``tpot_ms_p50`` is ≥ 20% lower; disable it when the gain is < 10% or ``throughput_tok_s``
regresses at concurrency 8. Read statistically, as a sequential test over ABAB rounds:

* **keep** when both c=1 keep rules clear their thresholds at the policy's confidence (the
  lower bound of the gain ≥ 30%, of the TPOT p50 reduction ≥ 20%) and no c=8 regression beyond
  the tolerance δ (``max_regression_c8``, 5%) is shown: before the last round that means the
  c=8 throughput ratio's lower bound is ≥ 1 − δ (non-inferiority shown, so stopping is safe);
  at the last round, that its upper bound is not below 1 − δ. A neutral c=8 keeps.
* **disable** when the c=1 gain is shown below 10% (upper bound < 10%), or a c=8 regression
  beyond δ is shown (upper bound < 1 − δ), or a keep rule is shown to fail (upper bound below
  its threshold: more rounds cannot lead to keep, and between 10% and 30% the seed keeps
  nothing);
* otherwise **add a round**; at the round limit (``max_rounds``) the conservative answer is
  disable (``Decision.conservative``).
* **inconclusive, held** when any response's tokens were estimated (no usage, no tokenizer):
  guessed counts never keep nor disable.

Every bound is one-sided at ``(1 − confidence)/max_rounds`` (Bonferroni over the looks), so a
rule's error over the whole sequence stays within ``1 − confidence``. The estimates are
stratified by prompt category and paired by prompt (`specdec.gatestats`): throughput as a ratio
of token rates (at c=8 the steady-state throughput, by Little's law), TPOT p50 as the median of
the category mixture of paired TPOT ratios; the interval adds per-request spread and the
policy's run-to-run noise (``run_noise``), or the rounds' observed spread when larger.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import yaml

from specdec.bench.stats import paired_median_ratio_ci, ratio_of_means_ci
from specdec.errors import GateError
from specdec.gatestats import Pair, median_ratio, rate_ratio
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
    "tokens_estimated",
    "z_for",
]

MIN_PAIRS = 1  # per-request records when there are any; else the level figures
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
    conservative: bool = False  # True: undecided at the round limit, answered disable
    keep_possible: bool = True  # False: more rounds cannot lead to keep
    figures: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    held: bool = False  # inconclusive for good (tokens estimated): stay on last-good
    code: str = ""  # keep | min_gain | c8_regression | keep_out_of_reach | round_limit |
    # more_rounds | tokens_estimated

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "reason": self.reason,
            "rules": [r.to_dict() for r in self.rules],
            "rounds": self.rounds,
            "conservative": self.conservative,
            "keep_possible": self.keep_possible,
            "held": self.held,
            "code": self.code,
            "figures": self.figures,
            "policy": self.policy,
            "warnings": self.warnings,
            "ci_level": 1.0 - 2.0 * (1.0 - float(self.policy.get("confidence", 0.95)))
            / max(1, int(self.policy.get("max_rounds", 1))),
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
    if not 0.0 <= pol.max_regression_c8 < 1.0:
        raise GateError(f"policy {where}: field 'max_regression_c8' must be in [0, 1), "
                        f"got {pol.max_regression_c8}")
    for name in ("run_noise", "request_noise"):
        if not 0.0 <= getattr(pol, name) < 1.0:
            raise GateError(f"policy {where}: field {name!r} must be in [0, 1), "
                            f"got {getattr(pol, name)}")


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


def _requests(result: Result, conc: int, what: str) -> list[Mapping[str, Any]]:
    reqs = _level(result, conc, what).get("requests") or []
    return [r for r in reqs if isinstance(r, Mapping)]


def _pairs(bases: Sequence[Result], cands: Sequence[Result], conc: int) -> list[Pair]:
    """Paired requests (same index and prompt in both arms of a round) of level ``conc``."""
    out: list[Pair] = []
    for rnd, (rb, rc) in enumerate(zip(bases, cands, strict=False)):
        bmap = {_pair_key(r, i): r for i, r in enumerate(_requests(rb, conc, "baseline"))
                if r.get("error") is None}
        for i, c in enumerate(_requests(rc, conc, "candidate")):
            b = bmap.get(_pair_key(c, i))
            if b is None or c.get("error") is not None:
                continue
            bt, bs = _num(b.get("output_tokens")), _num(b.get("e2el_ms"))
            ct, cs = _num(c.get("output_tokens")), _num(c.get("e2el_ms"))
            if bt and bs and ct and cs:
                out.append(Pair(str(c.get("category") or b.get("category") or "all"), rnd,
                                bt, bs / 1000, ct, cs / 1000, _num(b.get("tpot_ms")),
                                _num(c.get("tpot_ms"))))
    if len(out) >= MIN_PAIRS:
        return out
    # No per-request records: one pseudo-pair per round from the level figures.
    out = []
    for rnd, (rb, rc) in enumerate(zip(bases, cands, strict=False)):
        lb, lc = _level(rb, conc, "baseline"), _level(rc, conc, "candidate")
        tb = _number(lb, "throughput_tok_s", "baseline", conc)
        tc = _number(lc, "throughput_tok_s", "candidate", conc)
        if tb <= 0:
            raise GateError(f"baseline: field concurrency.{conc}.throughput_tok_s must be "
                            "positive")
        out.append(Pair("all", rnd, tb, 1.0, tc, 1.0, _num(lb.get("tpot_ms_p50")),
                        _num(lc.get("tpot_ms_p50"))))
    return out


def _population(bases: Sequence[Result], cands: Sequence[Result]) -> dict[str, float] | None:
    """Category counts of the measured prompt set (the population the rule is about)."""
    pops = []
    for r in [*bases, *cands]:
        cats = (r.get("prompts") or {}).get("categories") if isinstance(
            r.get("prompts"), Mapping) else None
        if not isinstance(cats, Mapping) or not cats:
            return None
        pops.append({str(k): float(v) for k, v in cats.items() if _num(v)})
    return pops[0] if all(p == pops[0] for p in pops) else None


def tokens_estimated(results: Sequence[Result]) -> list[str]:
    """Where token counts were estimated (no usage, no tokenizer): one line per level."""
    out = []
    for i, r in enumerate(results):
        for name, lvl in (r.get("concurrency") or {}).items():
            n = lvl.get("tokens_estimated") if isinstance(lvl, Mapping) else None
            if isinstance(n, int) and n > 0:
                out.append(f"result {i} concurrency {name}: {n} responses")
    return out


def _verdict(lo: float, hi: float, thr: float) -> str:
    return "pass" if lo >= thr else "fail" if hi < thr else "unclear"


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
def z_for(policy: GatePolicy) -> float:
    """One-sided normal quantile per look: the error ``1 − confidence`` split over the rounds."""
    return NormalDist().inv_cdf(1.0 - (1.0 - policy.confidence) / policy.max_rounds)


def _held(pol: GatePolicy, where: list[str], rounds: int) -> Decision:
    return Decision(
        "inconclusive", [], "tokens estimated: the server sent no usage and the model's "
        "tokenizer is not on the control node, so output tokens were not counted ("
        + "; ".join(where[:3]) + "); the host stays on its last-good release",
        pol.to_dict(), rounds=rounds, keep_possible=False, held=True, code="tokens_estimated")


def decide(
    baseline: Result | Sequence[Result],
    candidate: Result | Sequence[Result],
    policy: GatePolicy | None = None,
) -> Decision:
    """Decide from one or several rounds (ABAB runs) of benchmark results per arm; the number
    of rounds given is the look of the sequential test (the last is ``policy.max_rounds``)."""
    pol = policy or GatePolicy()
    _check_policy(pol, "(given)")
    bases = _as_list(baseline, "baseline")
    cands = _as_list(candidate, "candidate")
    for i, r in enumerate([*bases, *cands]):
        _check_result(dict(r), f"result {i}")
    warnings = _same_setup(bases, cands)
    look = min(len(bases), len(cands))
    est = tokens_estimated([*bases, *cands])
    if est:
        return _held(pol, est, look)
    final = look >= pol.max_rounds
    k1, k8 = pol.keep_concurrency, pol.guard_concurrency
    z = z_for(pol)
    pop = _population(bases, cands)
    p1 = _pairs(bases, cands, k1)
    has_guard = k8 != k1 and all(isinstance((r.get("concurrency") or {}).get(str(k8)), Mapping)
                                 for r in [*bases, *cands])
    p8 = _pairs(bases, cands, k8) if has_guard else []
    noise = (pol.run_noise, pol.request_noise)
    g = rate_ratio(p1, pop, z, *noise)
    try:
        t = median_ratio(p1, pop, z, *noise)
    except ValueError:
        raise GateError(f"no TPOT at concurrency {k1} in both arms (need tpot_ms per request "
                        "or tpot_ms_p50)") from None
    gain, gain_lo, gain_hi = g.ratio - 1.0, g.lo - 1.0, g.hi - 1.0
    red, red_lo, red_hi = 1.0 - t.ratio, 1.0 - t.hi, 1.0 - t.lo
    rules = [
        Rule(f"throughput_gain_c{k1}", gain, pol.keep_min_throughput_gain,
             _verdict(gain_lo, gain_hi, pol.keep_min_throughput_gain), (gain_lo, gain_hi),
             method=g.method, n=g.n),
        Rule(f"tpot_p50_reduction_c{k1}", red, pol.keep_min_tpot_reduction,
             _verdict(red_lo, red_hi, pol.keep_min_tpot_reduction), (red_lo, red_hi),
             method=t.method, n=t.n),
        Rule(f"min_gain_c{k1}", gain, pol.disable_below_gain,
             _verdict(gain_lo, gain_hi, pol.disable_below_gain), (gain_lo, gain_hi),
             method=g.method, n=g.n),
    ]
    figures: dict[str, Any] = {
        f"throughput_ratio_c{k1}": g.ratio, f"tpot_p50_ratio_c{k1}": t.ratio,
        "category_weights": g.weights, "z": z, "look": look,
        "baseline_throughput_tok_s": {str(k1): [
            _number(_level(r, k1, "baseline"), "throughput_tok_s", "baseline", k1)
            for r in bases]},
        "candidate_throughput_tok_s": {str(k1): [
            _number(_level(r, k1, "candidate"), "throughput_tok_s", "candidate", k1)
            for r in cands]},
    }
    guard_v = "unclear"
    if has_guard:
        e8 = rate_ratio(p8, pop, z, *noise)
        thr8 = -pol.max_regression_c8
        guard_v = _verdict(e8.lo - 1.0, e8.hi - 1.0, thr8)
        rules.append(Rule(f"no_regression_c{k8}", e8.ratio - 1.0, thr8, guard_v,
                          (e8.lo - 1.0, e8.hi - 1.0), method=e8.method, n=e8.n))
        figures[f"throughput_ratio_c{k8}"] = e8.ratio
    else:
        warnings.append(f"no concurrency {k8} level in both arms: the regression guard has no "
                        "data, so the result cannot be keep")
    v = {r.name: r.verdict for r in rules}
    keep_rules = (v[f"throughput_gain_c{k1}"], v[f"tpot_p50_reduction_c{k1}"])
    c8 = rules[-1] if has_guard else None
    code, conservative = "more_rounds", False
    if v[f"min_gain_c{k1}"] == "fail":
        dec, code = "disable", "min_gain"
        reason = (f"c={k1} throughput gain {gain:+.1%} (CI {gain_lo:+.1%}..{gain_hi:+.1%}) is "
                  f"below {pol.disable_below_gain:.0%}")
    elif guard_v == "fail" and c8 is not None:
        dec, code = "disable", "c8_regression"
        reason = (f"c={k8} throughput regresses beyond the {pol.max_regression_c8:.0%} "
                  f"tolerance ({c8.measured:+.1%}, CI {c8.ci[0]:+.1%}..{c8.ci[1]:+.1%})")
    elif keep_rules == ("pass", "pass") and (guard_v == "pass" or (final and has_guard)):
        dec, code = "keep", "keep"
        c8_text = (f"c={k8} is within the {pol.max_regression_c8:.0%} tolerance"
                   if guard_v == "pass" else
                   f"no c={k8} regression beyond {pol.max_regression_c8:.0%} is shown")
        reason = (f"c={k1} throughput {gain:+.1%} and TPOT p50 {-red:+.1%} clear the keep "
                  f"thresholds at the {pol.confidence:.0%} one-sided bound; {c8_text}")
    elif "fail" in keep_rules:
        dec, code = "disable", "keep_out_of_reach"
        failed = [r for r in rules[:2] if r.verdict == "fail"]
        reason = ("the gain does not reach the keep threshold: " + ", ".join(
            f"{r.name} {r.measured:+.1%} (CI {r.ci[0]:+.1%}..{r.ci[1]:+.1%}) < "
            f"{r.threshold:.0%}" for r in failed))
    elif final:
        dec, code, conservative = "disable", "round_limit", True
        unclear = [f"{r.name} ({r.verdict})" for r in rules if r.verdict != "pass"]
        reason = (f"still undecided after {look} round(s) (limit {pol.max_rounds}); "
                  "conservative answer: " + ", ".join(unclear))
    else:
        dec = "inconclusive"
        unclear = [f"{r.name} ({r.verdict})" for r in rules if r.verdict != "pass"]
        reason = "not decisive yet: " + ", ".join(unclear)
    keep_possible = dec == "keep" or (dec == "inconclusive" and has_guard)
    return Decision(dec, rules, reason, pol.to_dict(), rounds=look, figures=figures,
                    warnings=warnings, keep_possible=keep_possible, conservative=conservative,
                    code=code)


def decide_adaptive(
    run_round: Callable[[str, int], Mapping[str, Any]],
    policy: GatePolicy | None = None,
    on_round: Callable[[Decision], None] | None = None,
) -> Decision:
    """ABAB rounds: ``run_round(arm, i)`` runs one benchmark of arm ``baseline``/``candidate``.

    Adds rounds while the decision is inconclusive; `decide` answers at the last round
    (``policy.max_rounds``). A held result (tokens estimated) stops at once.
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
        if dec.decision != "inconclusive" or dec.held:
            break
    assert dec is not None
    return dec
