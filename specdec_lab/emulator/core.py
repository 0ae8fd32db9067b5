"""The engine core: continuous batching over a virtual clock (pure: no threads, no sleeping).

`EngineCore.step()` schedules one engine step the way vLLM V1 does (running sequences first,
then new ones, a token budget per step, chunked prefill, KV blocks of 16 tokens, preemption by
recompute when the KV cache is full), asks the `TimingModel` how long that step takes, draws
acceptance for every drafting sequence and returns the tokens each sequence produced. The HTTP
server's scheduler thread sleeps ``duration * time_scale`` per step; `simulate` just adds the
durations up, so both describe the same timeline.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from specdec_lab.emulator.acceptance import AcceptanceModel, acceptance_model, prompt_offset
from specdec_lab.emulator.profiles import ModelSpec
from specdec_lab.emulator.textgen import TextGenerator, natural_length, stable_int
from specdec_lab.emulator.timing import StepCost, StepLoad, TimingModel

__all__ = [
    "EngineCore",
    "EngineModel",
    "SeqOutput",
    "SeqRequest",
    "SimPrompt",
    "SimResult",
    "SpecConfig",
    "StepResult",
    "simulate",
]

BLOCK = 16


@dataclass(frozen=True)
class SpecConfig:
    method: str = "none"  # vLLM spelling
    k: int = 0
    draft: ModelSpec | None = None
    matched: bool = True  # False: an EAGLE head trained for another target
    # vLLM num_speculative_tokens_per_batch_size: ((start, end, k), ...), inclusive batch sizes
    k_by_batch: tuple[tuple[int, int, int], ...] = ()
    max_concurrency: int | None = None  # TRT-LLM: no speculation above this batch size
    variant: str = "chain"  # acceptance variant (`specdec_lab.emulator.acceptance.VARIANTS`)
    prompt_spread: float = 0.0  # per-prompt acceptance offset sd (`acceptance.prompt_offset`)

    @property
    def active(self) -> bool:
        return self.method != "none" and self.k > 0

    def k_for_batch(self, batch: int) -> int:
        if not self.active:
            return 0
        if self.max_concurrency is not None and batch > self.max_concurrency:
            return 0
        for lo, hi, k in self.k_by_batch:
            if lo <= batch <= hi:
                return min(k, self.k)
        return self.k


@dataclass(frozen=True)
class EngineModel:
    timing: TimingModel
    spec: SpecConfig
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    kv_capacity_tokens: int
    tokenizer: str = "llama3"
    seed: int = 0
    prefix_caching: bool = False


@dataclass(frozen=True)
class SeqRequest:
    prompt_key: int  # stable hash of the prompt content
    prompt_tokens: int
    category: str
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    temperature: float = 0.0
    seed: int | None = None
    prefix_blocks: tuple[int, ...] = ()  # chained block hashes (prefix caching)


@dataclass
class _Seq:
    id: int
    req: SeqRequest
    target_len: int
    finish_reason: str
    text: TextGenerator
    rng: random.Random
    acc: AcceptanceModel
    computed: int = 0  # tokens whose KV exists
    generated: int = 0
    cached: int = 0  # prompt tokens served from the prefix cache
    running: bool = False

    @property
    def context(self) -> int:
        return self.req.prompt_tokens + self.generated

    @property
    def prefilling(self) -> bool:
        return self.computed < self.context

    @property
    def blocks(self) -> int:
        return math.ceil(self.computed / BLOCK)


@dataclass(frozen=True)
class SeqOutput:
    seq_id: int
    tokens: tuple[str, ...]
    finished: bool
    finish_reason: str | None
    prompt_tokens: int
    cached_tokens: int
    generated: int  # total so far
    draft_tokens: int = 0  # drafted for this sequence in this step
    accepted: int = 0


@dataclass(frozen=True)
class StepResult:
    iteration: int
    duration_s: float  # physical (unscaled) seconds
    cost: StepCost
    load: StepLoad
    outputs: tuple[SeqOutput, ...]
    k: int
    drafts: int  # sequences that carried draft tokens
    draft_tokens: int
    accepted: int
    accepted_per_pos: tuple[int, ...]  # length k
    prefill_tokens: int
    new_prompt_tokens: int  # prompts that finished prefill this step (their full length)
    generated_tokens: int
    running: int
    waiting: int
    kv_usage: float  # 0..1
    preemptions: int
    context_requests: int
    generation_requests: int


_Planned = tuple[_Seq, int, int]  # (seq, query tokens, draft tokens) in one step


def _step_load(plan: list[_Planned], k: int) -> StepLoad:
    """What the planned step asks of the device (before any sequence advances)."""
    decode = [(s, q, d) for s, q, d in plan if not s.prefilling]
    prefill = [(s, q) for s, q, _ in plan if s.prefilling]
    return StepLoad(
        decode_seqs=len(decode),
        drafting_seqs=sum(1 for _, _, d in decode if d),
        draft_tokens=sum(d for _, _, d in decode),
        k=k,
        prefill_tokens=sum(q for _, q in prefill),
        kv_tokens=sum(s.computed for s, _, _ in plan) + sum(q for _, q in prefill),
    )


class EngineCore:
    """Sequences in, tokens out, one step at a time (not thread-safe: the caller locks)."""

    def __init__(self, model: EngineModel) -> None:
        self.model = model
        self._ids = 0
        self._counter = 0
        self._iteration = 0
        self.running: list[_Seq] = []
        self.waiting: deque[_Seq] = deque()
        self._capacity_blocks = max(1, model.kv_capacity_tokens // BLOCK)
        self._prefix: OrderedDict[int, None] = OrderedDict()

    # -- requests ---------------------------------------------------------------------------
    def add(self, req: SeqRequest) -> int:
        m = self.model
        self._ids += 1
        self._counter += 1
        sampled = req.temperature > 0
        variant: object = req.seed if req.seed is not None else (
            ("r", self._counter) if sampled else "greedy")
        if req.ignore_eos:
            n, reason = req.max_tokens, "length"
        else:
            natural = natural_length(stable_int(m.seed, req.prompt_key, variant, "eos"))
            n = max(req.min_tokens, min(natural, req.max_tokens))
            reason = "length" if n >= req.max_tokens else "stop"
        spec = m.spec
        acc = acceptance_model(
            spec.method, req.category, temperature=req.temperature,
            target_params=m.timing.target.params,
            draft_params=spec.draft.params if spec.draft else 0.0, matched=spec.matched,
            variant=spec.variant,
        ).for_prompt(prompt_offset(req.prompt_key, spec.prompt_spread))
        seq = _Seq(
            id=self._ids, req=req, target_len=max(1, n), finish_reason=reason,
            text=TextGenerator(stable_int(m.seed, req.prompt_key, variant, "text"),
                               req.category),
            rng=random.Random(stable_int(m.seed, req.prompt_key, variant, "accept")),
            acc=acc,
        )
        self.waiting.append(seq)
        return seq.id

    def abort(self, seq_id: int) -> None:
        self.running = [s for s in self.running if s.id != seq_id]
        self.waiting = deque(s for s in self.waiting if s.id != seq_id)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def kv_usage(self) -> float:
        return sum(s.blocks for s in self.running) / self._capacity_blocks

    # -- scheduling -------------------------------------------------------------------------
    def _used_blocks(self) -> int:
        return sum(s.blocks for s in self.running)

    def _cached_prefix(self, req: SeqRequest) -> int:
        if not self.model.prefix_caching:
            return 0
        hit = 0
        for h in req.prefix_blocks:
            if h not in self._prefix:
                break
            self._prefix.move_to_end(h)
            hit += 1
        return min(hit * BLOCK, max(0, req.prompt_tokens - 1))

    def _remember_prefix(self, req: SeqRequest) -> None:
        if not self.model.prefix_caching:
            return
        for h in req.prefix_blocks:
            self._prefix[h] = None
            self._prefix.move_to_end(h)
        while len(self._prefix) > self._capacity_blocks:
            self._prefix.popitem(last=False)

    def _preempt(self, seq: _Seq) -> None:
        self.running.remove(seq)
        seq.running = False
        seq.computed = 0
        seq.cached = 0
        self.waiting.appendleft(seq)

    def step(self) -> StepResult | None:
        """Run one engine step; None when there is nothing to do."""
        if not self.has_work():
            return None
        m = self.model
        batch_guess = min(m.max_num_seqs, len(self.running) + len(self.waiting))
        k = m.spec.k_for_batch(batch_guess)
        plan, budget, used, preempted = self._schedule_running(k)
        if not preempted:
            self._admit_waiting(plan, budget, used)
        load = _step_load(plan, k)
        cost = m.timing.step_time(load)
        return self._advance(plan, k, load, cost, preempted)

    def _schedule_running(self, k: int) -> tuple[list[_Planned], int, int, int]:
        """Running sequences first, preempting the newest when KV blocks run out.
        Returns (plan, budget left, blocks used, preemptions)."""
        budget = self.model.max_num_batched_tokens
        preempted = 0
        plan: list[_Planned] = []
        used = self._used_blocks()
        for seq in list(self.running):
            if seq not in self.running:
                continue  # preempted below
            if seq.prefilling:
                chunk = min(seq.context - seq.computed, budget)
                draft = 0
            else:
                draft = k if k and seq.acc.has_draft(seq.rng) else 0
                chunk = 1 + draft
            if chunk <= 0:
                continue
            need = math.ceil((seq.computed + chunk) / BLOCK) - seq.blocks
            while used + need > self._capacity_blocks and len(self.running) > 1:
                victim = self.running[-1]
                if victim is seq:
                    break
                used -= victim.blocks
                plan = [p for p in plan if p[0] is not victim]
                self._preempt(victim)
                preempted += 1
            if used + need > self._capacity_blocks:
                used -= seq.blocks
                self._preempt(seq)
                preempted += 1
                continue
            used += need
            budget -= chunk
            plan.append((seq, chunk, draft))
        return plan, budget, used, preempted

    def _admit_waiting(self, plan: list[_Planned], budget: int, used: int) -> None:
        """Then waiting sequences, in order, while seats, budget and KV blocks last."""
        m = self.model
        while self.waiting and len(self.running) < m.max_num_seqs and budget > 0:
            seq = self.waiting[0]
            if seq.computed == 0:
                seq.cached = self._cached_prefix(seq.req) if seq.generated == 0 else 0
                seq.computed = seq.cached
            chunk = min(seq.context - seq.computed, budget)
            need = math.ceil((seq.computed + chunk) / BLOCK)
            if used + need > self._capacity_blocks:
                seq.computed = 0
                break
            self.waiting.popleft()
            seq.running = True
            self.running.append(seq)
            used += need
            budget -= chunk
            plan.append((seq, chunk, 0))

    def _advance(self, plan: list[_Planned], k: int, load: StepLoad, cost: StepCost,
                 preempted: int) -> StepResult:
        """Advance every planned sequence (acceptance drawn for drafting ones); the result."""
        outputs: list[SeqOutput] = []
        per_pos = [0] * k
        drafts = accepted_total = new_prompt = gen_total = 0
        for seq, q, draft in plan:
            if seq.prefilling:
                seq.computed += q
                if seq.prefilling:
                    continue
                new_prompt += seq.req.prompt_tokens if seq.generated == 0 else 0
                if seq.generated == 0:
                    self._remember_prefix(seq.req)
                emit = 1
                accepted = 0
            else:
                accepted = seq.acc.draw(seq.rng, draft) if draft else 0
                if draft:
                    drafts += 1
                    accepted_total += accepted
                    for i in range(accepted):
                        per_pos[i] += 1
                emit = accepted + 1
            emit = min(emit, seq.target_len - seq.generated)
            seq.generated += emit
            seq.computed = seq.context  # rejected drafts' KV is discarded
            gen_total += emit
            done = seq.generated >= seq.target_len
            outputs.append(SeqOutput(
                seq_id=seq.id, tokens=tuple(seq.text.next_tokens(emit)), finished=done,
                finish_reason=seq.finish_reason if done else None,
                prompt_tokens=seq.req.prompt_tokens, cached_tokens=seq.cached,
                generated=seq.generated, draft_tokens=draft, accepted=accepted,
            ))
            if done:
                self.running.remove(seq)
                seq.running = False
        self._iteration += 1
        return StepResult(
            iteration=self._iteration, duration_s=cost.total_s, cost=cost, load=load,
            outputs=tuple(outputs), k=k, drafts=drafts,
            draft_tokens=load.draft_tokens, accepted=accepted_total,
            accepted_per_pos=tuple(per_pos), prefill_tokens=load.prefill_tokens,
            new_prompt_tokens=new_prompt, generated_tokens=gen_total,
            running=len(self.running), waiting=len(self.waiting), kv_usage=self.kv_usage,
            preemptions=preempted, context_requests=len(plan) - load.decode_seqs,
            generation_requests=load.decode_seqs,
        )


# -- simulation (no sleeping) -----------------------------------------------------------------
@dataclass(frozen=True)
class SimPrompt:
    key: int
    prompt_tokens: int
    category: str


@dataclass(frozen=True)
class SimRequest:
    category: str
    arrival_s: float
    ttft_s: float
    e2e_s: float
    output_tokens: int

    @property
    def tpot_s(self) -> float | None:
        if self.output_tokens <= 1:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass(frozen=True)
class SimResult:
    requests: tuple[SimRequest, ...]
    duration_s: float
    output_tokens: int
    steps: int
    drafts: int
    draft_tokens: int
    accepted: int
    mean_batch: float
    per_category: dict[str, float] = field(default_factory=dict)  # acceptance length

    @property
    def throughput_tok_s(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def tpot_ms_p50(self) -> float:
        vals = [r.tpot_s for r in self.requests if r.tpot_s is not None]
        return statistics.median(vals) * 1000 if vals else float("nan")

    @property
    def ttft_ms_p50(self) -> float:
        return statistics.median(r.ttft_s for r in self.requests) * 1000

    @property
    def acceptance_length(self) -> float | None:
        return 1.0 + self.accepted / self.drafts if self.drafts else None


def simulate(
    model: EngineModel,
    prompts: Sequence[SimPrompt],
    *,
    concurrency: int,
    num_requests: int,
    max_tokens: int,
    ignore_eos: bool = True,
    temperature: float = 0.0,
) -> SimResult:
    """Closed-loop benchmark on the virtual clock: ``concurrency`` clients, each sending its next
    request as soon as the previous one completes (prompts taken in order, cycling)."""
    core = EngineCore(model)
    now = 0.0
    issued = 0
    pending: list[tuple[float, int]] = []  # (arrival time, prompt index) not yet added
    info: dict[int, dict[str, float | str]] = {}
    done: list[SimRequest] = []
    steps = 0
    batch_sum = 0
    drafts = draft_tokens = accepted = 0
    cat_acc: dict[str, list[int]] = {}  # category -> [drafts, accepted]

    def issue(at: float) -> None:
        nonlocal issued
        if issued < num_requests:
            pending.append((at, issued % len(prompts)))
            issued += 1

    for _ in range(min(concurrency, num_requests)):
        issue(0.0)
    while len(done) < num_requests:
        for at, idx in [p for p in pending if p[0] <= now]:
            pending.remove((at, idx))
            p = prompts[idx]
            sid = core.add(SeqRequest(
                prompt_key=p.key, prompt_tokens=p.prompt_tokens, category=p.category,
                max_tokens=max_tokens, min_tokens=max_tokens if ignore_eos else 0,
                ignore_eos=ignore_eos, temperature=temperature,
            ))
            info[sid] = {"arrival": at, "category": p.category}
        if not core.has_work():
            now = min(at for at, _ in pending)
            continue
        res = core.step()
        if res is None:
            break
        now += res.duration_s
        steps += 1
        batch_sum += res.context_requests + res.generation_requests
        drafts += res.drafts
        draft_tokens += res.draft_tokens
        accepted += res.accepted
        for out in res.outputs:
            rec = info[out.seq_id]
            if out.draft_tokens:
                ca = cat_acc.setdefault(str(rec["category"]), [0, 0])
                ca[0] += 1
                ca[1] += out.accepted
            rec.setdefault("first", now)
            if out.finished:
                cat = str(rec["category"])
                done.append(SimRequest(
                    category=cat, arrival_s=float(rec["arrival"]),
                    ttft_s=float(rec["first"]) - float(rec["arrival"]),
                    e2e_s=now - float(rec["arrival"]), output_tokens=out.generated,
                ))
                issue(now)
    start = min(r.arrival_s for r in done)
    end = max(r.arrival_s + r.e2e_s for r in done)
    return SimResult(
        requests=tuple(done), duration_s=end - start,
        output_tokens=sum(r.output_tokens for r in done), steps=steps, drafts=drafts,
        draft_tokens=draft_tokens, accepted=accepted,
        mean_batch=batch_sum / steps if steps else 0.0,
        per_category={c: 1.0 + a / d for c, (d, a) in sorted(cat_acc.items()) if d},
    )
