"""specdec.tune.search (curve fit and search), the tune cache, the per-batch-size schedule, the
chart."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from specdec.errors import RenderError
from specdec.gate.rounds import BenchSettings
from specdec.plan.planner import make_plan
from specdec.plan.types import GatePolicy
from specdec.render.files import render, speculative_config
from specdec.report.fleet import index_html
from specdec.tune.cache import apply_cached, cache_key, entry_id, store, tuned_plan
from specdec.tune.chart import tune_chart
from specdec.tune.search import (
    K_MAX,
    MAX_ROUNDS,
    POINT_ROUNDS,
    POOL_Z,
    SAME_Z,
    Config,
    Search,
    TuneResult,
    level_fit,
    point_benches,
    schedule,
)

CATS = {"chat": 16, "code": 16, "summarization": 12, "repetitive": 8}
P = {"chat": 0.7, "code": 0.55, "summarization": 0.75, "repetitive": 0.9}  # per position


def chain(k: int, p: float, steps: int) -> list[int]:
    """Counts of chunk sizes (index = tokens) over ``steps`` engine steps, chain acceptance."""
    out = [0] * (k + 2)
    for j in range(k + 1):  # j drafts accepted: j + 1 tokens
        share = p ** j * (1 - p) if j < k else p ** k
        out[j + 1] += round(steps * share)
    return out


def arm(k: int, step_ms: float, n_tok: int = 64, conc: tuple[int, ...] = (1, 8),
        slow8: float = 1.0) -> dict[str, Any]:
    """A bench result of drafting k tokens (k = 0: the baseline) with a given step time."""
    levels = {}
    for c in conc:
        reqs = []
        for cat in CATS:
            hist = chain(k, P[cat], 400) if k else [0, 400]
            per_step = sum(i * n for i, n in enumerate(hist)) / sum(hist)
            steps = (n_tok - 1) / per_step
            step = step_ms * (slow8 if c > 1 else 1.0)
            e2e = 30.0 + steps * step
            reqs.append({"category": cat, "output_tokens": n_tok, "ttft_ms": 30.0,
                         "e2el_ms": e2e, "tpot_ms": steps * step / (n_tok - 1),
                         "chunks": steps + 1, "chunk_hist": hist, "error": None})
        levels[str(c)] = {"requests": reqs, "throughput_tok_s": 1.0}
    return {"concurrency": levels}


def step_time(k: int, base: float = 50.0, per_k: float = 6.0) -> float:
    return base * 1.05 + per_k * k if k else base


def search(per_batch: bool = False, methods: tuple[tuple[str, str | None], ...] = (
        ("eagle3", "head"),)) -> Search:
    s = Search(methods, GatePolicy(), CATS, per_batch, max_num_seqs=8)
    s.add_baseline(arm(0, step_time(0)))
    return s


def test_tokens_per_step_come_from_the_chunk_sizes_at_a_larger_k() -> None:
    fit = level_fit(arm(8, step_time(8)), 1)
    assert fit is not None
    for k in (1, 3, 8):
        want = 1 + sum(P["code"] ** i for i in range(1, k + 1))
        assert fit.tokens_per_step("code", k) == pytest.approx(want, rel=0.02)


def test_search_measures_a_few_points_and_picks_the_best_k() -> None:
    s = search()
    cfg: Config | None = Config("eagle3", "head", 3)
    while cfg is not None:
        s.add(cfg, arm(cfg.k, step_time(cfg.k)), seconds=10.0)
        cfg = s.next()
    res = s.choose()
    measured = [p["k"] for p in res.measured]
    assert measured[:2] == [3, K_MAX] and len(measured) <= 3
    # the true optimum of L(k)/t(k) over k = 1..8 for this curve
    def true(k: int) -> float:
        return sum(w * (1 + sum(P[c] ** i for i in range(1, k + 1))) / step_time(k)
                   for c, w in CATS.items())
    best = max(range(1, K_MAX + 1), key=true)
    assert true(res.config.k) >= 0.97 * true(best)
    assert res.config.k in measured and res.bench_seconds == 10.0 * len(measured)
    curve = res.curves[0]["points"]
    assert [p["k"] for p in curve] == list(range(1, K_MAX + 1))
    assert all(p["measured"] == (p["k"] in measured) for p in curve)


def diluted(k: int, step_ms: float, dilution: float) -> dict[str, Any]:
    """`arm` where every position's acceptance falls by ``dilution`` per extra drafted token
    (a world where drafting fewer tokens is not a truncation of the same chain)."""
    res = arm(k, step_ms)
    f = 1.0 - dilution * (k - 1)
    for lvl in res["concurrency"].values():
        for r in lvl["requests"]:
            hist = chain(k, P[r["category"]] * f, 400)
            per_step = sum(i * n for i, n in enumerate(hist)) / sum(hist)
            steps = (r["output_tokens"] - 1) / per_step
            r.update(chunk_hist=hist, chunks=steps + 1, e2el_ms=30.0 + steps * step_ms)
    return res


def test_a_higher_point_that_disagrees_with_a_lower_one_is_not_pooled_into_its_k() -> None:
    def fitted(dilution: float) -> tuple[Search, list[int], float]:
        s = search()
        for k in (4, 8):
            s.add(Config("eagle3", "head", k), diluted(k, step_time(k), dilution))
        m = s.methods[0]
        return s, s.pooled(m, 1, 3), s._hist(m, 1, 4).tokens_per_step("code", 4)

    # the chain holds: k=8's chunk sizes cut at 5 tokens agree with k=4's and are pooled
    _, pooled, _ = fitted(0.0)
    assert pooled == [4, 8]
    # acceptance 17.5% lower at every position when 8 are drafted: k=4's L is its own
    _, pooled, l4 = fitted(0.025)
    assert pooled == [4]
    p = P["code"] * (1 - 0.025 * 3)
    assert l4 == pytest.approx(1 + sum(p ** i for i in range(1, 5)), rel=0.02)


def test_the_pooling_test_is_one_sided_and_leaves_out_a_small_fall() -> None:
    def pair(dilution: float) -> tuple[float, list[int]]:
        s = search()
        for k in (4, 8):
            s.add(Config("eagle3", "head", k), diluted(k, step_time(k), dilution))
        m = s.methods[0]
        return s._z(m.points[4][1], m.points[8][1], 4), s.pooled(m, 1, 3)

    # k=8 accepting less by between POOL_Z and SAME_Z standard errors (a two-sided test at
    # SAME_Z would pool it): left out of k=4's estimate
    z, pooled = pair(0.004)
    assert POOL_Z < z < SAME_Z and pooled == [4]
    # k=8 accepting more, even beyond SAME_Z: not the way the chain fails, pooled
    z, pooled = pair(-0.008)
    assert z < -SAME_Z and pooled == [4, 8]


def test_in_a_diluted_world_the_search_finds_the_smaller_k() -> None:
    # acceptance falls 2.5% a position per extra drafted token: the best k is 3; k=5's own
    # sizes cut shorter (a chain) underrate every smaller k, so the curve alone stops at k=5
    # (95.5% of the best); k=8 accepting less than k=5 at k=5's length sends it below k=5
    def step(k: int) -> float:
        return step_time(k, per_k=4.0)

    def true(k: int) -> float:
        f = 1 - 0.025 * (k - 1)
        return sum(w * (1 + sum((P[c] * f) ** i for i in range(1, k + 1))) / step(k)
                   for c, w in CATS.items())

    best = max(range(1, K_MAX + 1), key=true)
    s = search()
    cfg: Config | None = Config("eagle3", "head", 5)
    while cfg is not None:
        s.add(cfg, diluted(cfg.k, step(cfg.k), 0.025))
        cfg = s.next()
    k = s.choose().config.k
    assert best == 3 and true(k) >= 0.98 * true(best)


def test_a_tune_point_is_several_rounds_on_one_release() -> None:
    pol, bs = GatePolicy(), BenchSettings()
    rbs = point_benches(bs, pol)
    assert len(rbs) == POINT_ROUNDS >= 2
    assert rbs[0].levels == (pol.keep_concurrency, pol.guard_concurrency) and rbs[0].warmup
    assert all(rb.levels == (pol.keep_concurrency,) and not rb.warmup for rb in rbs[1:])
    assert len({rb.offsets[0] for rb in rbs}) == POINT_ROUNDS  # fresh prompts each round
    # the further rounds are pooled into the point (step time: the runs' mean), c=8 from the
    # first; one visit (one restart) however many rounds
    s = search()
    s.add(Config("eagle3", "head", 4), arm(4, 60.0), 3.0,
          [arm(4, 80.0, conc=(1,)) for _ in range(POINT_ROUNDS - 1)])
    m = s.methods[0]
    want = (60.0 + 80.0 * (POINT_ROUNDS - 1)) / POINT_ROUNDS / 1000
    assert m.points[4][1].step_s == pytest.approx(want, rel=1e-6)
    assert m.points[4][8].step_s == pytest.approx(0.06, rel=1e-6)
    assert m.visits == {4: 1} and len(s.order) == 1 and s.bench_seconds == 3.0
    with pytest.raises(ValueError, match="further round"):
        s.add(Config("eagle3", "head", 5), arm(5, 60.0), 1.0, [arm(5, 60.0, conc=(8,))])


def rounds(k: int, n: int, spread: float = 0.04) -> list[dict[str, Any]]:
    """``n`` further keep-level rounds at k whose step times alternate by ``spread`` (each run
    its own clock state)."""
    return [arm(k, step_time(k) * (1 + spread * (-1) ** i), conc=(1,)) for i in range(n)]


def test_more_rounds_of_the_running_point_while_it_is_tied() -> None:
    # k = 3 and 4 are within 0.5% on this curve, well within their standard errors (1.7%):
    # the running one (k = 4) is measured further, no restart, up to MAX_ROUNDS
    s = search()
    for k in (3, 4):
        s.add(Config("eagle3", "head", k), arm(k, step_time(k)), 1.0,
              rounds(k, POINT_ROUNDS - 1))
    m = s.methods[0]
    assert sorted(s.tied(m)) == [3, 4]
    assert s.first_round(Config("eagle3", "head", 3)) == 0  # not running: a restart
    cfg = s.next()
    assert cfg == Config("eagle3", "head", 4) and s.first_round(cfg) == POINT_ROUNDS
    rbs = point_benches(BenchSettings(), s.policy, s.first_round(cfg))
    assert len(rbs) == POINT_ROUNDS and all(not rb.warmup for rb in rbs)
    assert all(rb.levels == (s.policy.keep_concurrency,) for rb in rbs)
    first = {rb.offsets[0] for rb in point_benches(BenchSettings(), s.policy)}
    assert not first & {rb.offsets[0] for rb in rbs}  # fresh prompts
    while cfg == Config("eagle3", "head", 4):
        got = rounds(4, POINT_ROUNDS)
        s.add(cfg, got[0], 2.0, got[1:])
        cfg = s.next()
    # one visit (restart) of k = 4 however many rounds, and the order says how many
    assert len(m.results[4]) == MAX_ROUNDS and m.visits == {3: 1, 4: 1}
    assert [(p["k"], p["rounds"]) for p in s.order] == [(3, POINT_ROUNDS), (4, MAX_ROUNDS)]
    assert s.bench_seconds == 2.0 + 2.0 * (MAX_ROUNDS // POINT_ROUNDS - 1)
    # the baseline measured in between: nothing of the tune runs, first_round is 0
    s.add_baseline(arm(0, step_time(0)))
    assert s.first_round(Config("eagle3", "head", 4)) == 0


def test_the_repeat_of_two_close_methods_counts_more_rounds_of_the_running_point() -> None:
    # two methods within REPEAT_MARGIN: each best point is measured twice; when it runs
    # already, that is more rounds of it (no restart), which count as the second measurement
    # (else the search would ask for it again and again)
    s = search(methods=(("eagle3", "head"), ("ngram", None)))
    s.add(Config("eagle3", "head", 4), arm(4, step_time(4)), 1.0, rounds(4, POINT_ROUNDS - 1))
    ngram = Config("ngram", None, 4)
    s.add(ngram, arm(4, step_time(4, per_k=5.0)), 1.0, rounds(4, POINT_ROUNDS - 1))
    assert s._repeat() == ngram and s.first_round(ngram) == POINT_ROUNDS
    got = rounds(4, POINT_ROUNDS)
    s.add(ngram, got[0], 1.0, got[1:])
    assert s._repeat() == Config("eagle3", "head", 4)


def test_no_more_rounds_when_the_points_are_far_apart() -> None:
    # k = 1 is 6% below k = 8, beyond their standard errors: no more rounds of the running k = 8
    s = search()
    for k in (1, 8):
        s.add(Config("eagle3", "head", k), arm(k, step_time(k)), 1.0,
              rounds(k, POINT_ROUNDS - 1))
    assert s.tied(s.methods[0]) == [8]
    assert s.next() != Config("eagle3", "head", 8)


def test_a_second_method_that_cannot_come_close_gets_one_point() -> None:
    s = search(methods=(("eagle3", "head"), ("ngram", None)))
    cfg: Config | None = Config("eagle3", "head", 3)
    while cfg is not None:
        # n-gram here: a tenth of EAGLE's acceptance, so it never pays
        slow = cfg.method == "ngram"
        res = arm(cfg.k, step_time(cfg.k, per_k=0.5 if slow else 6.0))
        if slow:
            for lvl in res["concurrency"].values():
                for r in lvl["requests"]:
                    r["chunk_hist"] = chain(cfg.k, 0.05, 400)
                    r["chunks"] = 64 / 1.05
                    r["e2el_ms"] = 30 + r["chunks"] * step_time(cfg.k, per_k=0.5)
        s.add(cfg, res)
        cfg = s.next()
    res = s.choose()
    assert res.config.method == "eagle3"
    assert [p["k"] for p in res.measured if p["method"] == "ngram"] == [K_MAX]


def test_c8_regression_steers_the_single_k_and_the_per_batch_schedule() -> None:
    def run(per_batch: bool) -> TuneResult:
        s = search(per_batch)
        cfg: Config | None = Config("eagle3", "head", 3)
        while cfg is not None:
            # at c=8 every drafted token costs 4x: large k regresses there
            res = arm(cfg.k, step_time(cfg.k))
            for r in res["concurrency"]["8"]["requests"]:
                r["e2el_ms"] = 30 + (r["chunks"] - 1) * step_time(cfg.k, per_k=30.0)
            s.add(cfg, res)
            cfg = s.next()
        return s.choose()

    single, per_batch = run(False), run(True)
    curve = {p["k"]: p for p in single.curves[0]["points"]}
    assert curve[single.config.k]["c8"] >= 0.9  # the guard's tolerance holds at the choice
    assert not single.config.k_by_batch
    sched = per_batch.config.k_by_batch
    assert sched[0][:2] == (1, 2) and sched[1][:2] == (3, 8)
    assert sched[0][2] > sched[1][2] and per_batch.config.k == max(r[2] for r in sched)


def test_schedule_is_vllms_format() -> None:
    assert schedule(5, 5, 8) == ()
    assert schedule(6, 0, 16) == ((1, 2, 6), (3, 16, 0))


def test_per_batch_schedule_renders_only_where_the_release_has_it() -> None:
    data = {"specdec_device": "dgx-spark", "specdec_model": "Qwen/Qwen3-8B",
            "specdec_image": "nvcr.io/nvidia/vllm:26.10-py3"}
    plan = make_plan("s", data, None)
    assert plan.engine_version == "0.31.0" and plan.k_auto
    res = TuneResult(Config(plan.method, plan.draft, 6, ((1, 2, 6), (3, 16, 0))), [], [],
                     "o", 0.0)
    tuned = tuned_plan(plan, res)
    cfg = speculative_config(tuned)
    assert cfg is not None
    assert cfg["num_speculative_tokens_per_batch_size"] == [[1, 2, 6], [3, 16, 0]]
    assert cfg["num_speculative_tokens"] == 6
    old = make_plan("s", {**data, "specdec_image": "nvcr.io/nvidia/vllm:25.11-py3"}, None)
    with pytest.raises(RenderError, match="num_speculative_tokens_per_batch_size"):
        render(tuned_plan(old, res))


def test_tune_cache_carries_the_tuned_values_into_the_plan(tmp_path: Path) -> None:
    plan = make_plan("agx", {"specdec_device": "agx-orin-64gb",
                             "specdec_model": "meta-llama/Llama-3.1-8B-Instruct"}, None)
    assert plan.k_auto and plan.tune_methods[1] == ("ngram", None)
    assert apply_cached(plan, tmp_path, False) == plan  # nothing cached yet
    res = TuneResult(Config("ngram", None, 8), [], [{"method": "ngram", "k": 8}], "o", 12.0)
    path = Path(store(tmp_path, plan, res, {"host": "agx"}))
    assert path == tmp_path / f"{entry_id(plan)}.json" and json.loads(path.read_text())["key"] \
        == cache_key(plan)
    other_host = make_plan("agx-2", {"specdec_device": "agx-orin-64gb",
                                     "specdec_model": "meta-llama/Llama-3.1-8B-Instruct"}, None)
    tuned = apply_cached(other_host, tmp_path, False)  # same device, image, model: shared
    assert (tuned.method, tuned.draft, tuned.num_speculative_tokens) == ("ngram", None, 8)
    assert tuned.tuned and "tuned on the host: ngram k=8" in tuned.notes[-1]
    assert render(tuned).release_id == render(tuned_plan(other_host, res)).release_id
    assert apply_cached(other_host, tmp_path, True) == other_host  # specdec_reverify
    pinned = make_plan("agx", {"specdec_device": "agx-orin-64gb",
                               "specdec_num_speculative_tokens": 3,
                               "specdec_model": "meta-llama/Llama-3.1-8B-Instruct"}, None)
    assert not pinned.k_auto and apply_cached(pinned, tmp_path, False) == pinned


def test_report_shows_the_curve() -> None:
    s = search()
    cfg: Config | None = Config("eagle3", "head", 3)
    while cfg is not None:
        s.add(cfg, arm(cfg.k, step_time(cfg.k)))
        cfg = s.next()
    tune = {**s.choose().to_dict(), "wall_seconds": 42.0}
    svg = tune_chart("agx", tune)
    assert svg.startswith("<svg") and "<script" not in svg and svg.count("<circle") >= 4
    html = index_html([{"host": "agx", "outcome": "kept", "method": "eagle3",
                        "num_speculative_tokens": tune["config"]["k"], "tune": tune}], "r1")
    assert "Tuning (num_speculative_tokens: auto)" in html and "[tuned]" in html


def test_a_long_title_is_not_cut_off() -> None:
    """An SVG clips text at its width: the chart is as wide as its title needs."""
    s = search()
    cfg: Config | None = Config("eagle3", "RedHatAI/Qwen3-8B-speculator.eagle3", 3)
    s.methods[0] = type(s.methods[0])("eagle3", "RedHatAI/Qwen3-8B-speculator.eagle3")
    while cfg is not None:
        s.add(cfg, arm(cfg.k, step_time(cfg.k)))
        cfg = s.next()
    tune = s.choose().to_dict()
    tune["config"]["k_by_batch"] = [[1, 2, 6], [3, 16, 8]]
    host = "a-rather-long-host-name.example.lan"
    svg = tune_chart(host, tune)
    width = int(re.search(r'width="(\d+)"', svg).group(1))  # type: ignore[union-attr]
    texts = re.findall(r'<text x="0" y="\d+"[^>]*>([^<]*)</text>', svg)
    assert len(texts) == 2 and host in texts[0] and texts[1].startswith("kept: ")
    assert all(width >= 6.3 * len(t) for t in texts)


def test_a_schedule_that_may_not_grow_drafts_most_at_batch_one() -> None:
    """TensorRT-LLM's draft_len_schedule wants max_draft_len at its smallest batch size and no
    more above it (`nonincreasing`); a method the release does not schedule gets one k."""
    def run(**kw: Any) -> TuneResult:
        s = Search((("eagle3", "head"),), GatePolicy(), CATS, True, max_num_seqs=8, **kw)
        s.add_baseline(arm(0, step_time(0)))
        cfg: Config | None = Config("eagle3", "head", 3)
        while cfg is not None:
            # drafting is dear at c=1 and nearly free at c=8: the c=8 optimum is the larger k
            res = arm(cfg.k, step_time(cfg.k, per_k=25.0))
            for r in res["concurrency"]["8"]["requests"]:
                r["e2el_ms"] = 30 + (r["chunks"] - 1) * step_time(cfg.k, per_k=0.5)
            s.add(cfg, res)
            cfg = s.next()
        return s.choose()

    free = run().config
    assert free.k_by_batch and free.k_by_batch[1][2] > free.k_by_batch[0][2]
    held = run(nonincreasing=True).config
    # k at c=8 held to at most batch one's, which here is all of it: one k, batch one's
    assert (held.k, held.k_by_batch) == (free.k_by_batch[0][2], ())
    assert not run(schedulable=()).config.k_by_batch
