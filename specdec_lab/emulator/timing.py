"""The physical timing model (pure: no clocks, no sleeping).

One engine step runs the drafter (when speculating) and one forward of the target over every
scheduled token. A forward is bound by memory or by compute, whichever is slower::

    t_forward = max((weight bytes + KV bytes read) / bandwidth, 2 * active params * tokens / FLOPs)
                + launch overhead

with bandwidth and FLOPs the *achievable* fractions of the device's peak (see `profiles`).
Launch overhead is one CUDA-graph replay per forward, or one launch per kernel with
``--enforce-eager``. Each engine step also pays a fixed CPU cost (scheduler, sampler,
detokeniser) that depends on the device's CPU; TRT-LLM's overlap scheduler hides most of it.

Drafter cost per step, for ``k`` draft tokens and ``B`` drafting sequences:

* EAGLE/EAGLE-3/MTP head: ``k`` sequential head forwards (head bytes / bandwidth each: cheap);
* Medusa/MLP speculator: one forward of all heads;
* draft model: ``k`` sequential forwards of a whole small model (its bytes each: expensive), and
  the draft model prefills the prompt too;
* n-gram / suffix: a CPU lookup per sequence (no GPU work).

The target then verifies ``B * (k + 1)`` tokens in one forward: the compute term grows with both
``k`` and the batch, which is why speculation stops paying (and can regress) at high concurrency.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specdec_lab.emulator.profiles import DeviceProfile, ModelSpec

__all__ = [
    "KERNELS_PER_LAYER",
    "LOOKUP_CPU_S",
    "SPEC_KINDS",
    "StepCost",
    "StepLoad",
    "TimingModel",
    "forward_time",
]

KERNELS_PER_LAYER = 12  # eager launches per decoder layer (norms, qkv, rope, attn, o, mlp, ...)
LOOKUP_CPU_S = 25e-6  # n-gram lookup per sequence on a Grace core
# What speculation costs beyond moving bytes, in units of the device's per-step CPU cost
# (`DeviceProfile.sched_overhead_s`): each sequential drafter forward (sampling its token,
# gathering hidden states, its launches) and each speculative step (the rejection sampler,
# proposer bookkeeping). Fitted on vLLM issue #20780's H100 sweep (Llama-3.1-8B + yuhuili
# EAGLE-3, batch 1): its speed-ups at k=2 (1.64x) and k=7 (1.65x) give 0.415 ms per drafter
# forward and 0.413 ms per step over the bandwidth model on the h100-sxm profile; k=3..6 and
# PR #16937's k=2 figure are held out (specdec_lab/emulator/calibration.py). Other devices scale
# with their CPU cost per step (an assumption: no Orin or Spark sweep is published).
DRAFT_FORWARD_X = 1.66
SPEC_STEP_X = 1.65
# The "measured" variant (`specdec_lab.emulator.acceptance.VARIANTS`): drafting k tokens costs the
# linear model's k forwards times (k/2)^(CONCAVE - 1), the power law through vLLM issue #20780's
# measured extra step time over k = 2..7 (3.13, 4.34, 5.40, 6.64, 7.46, 8.12 ms: exponent 0.76),
# equal to the linear model at k = 2, cheaper per token beyond, dearer at k = 1.
CONCAVE = 0.76
SPEC_KINDS = ("none", "head", "parallel_head", "draft", "lookup")


def forward_time(
    device: DeviceProfile,
    *,
    weight_bytes: float | Callable[[int], float],
    active_params: float,
    query_tokens: int,
    kv_read_bytes: float,
    launch_s: float,
) -> float:
    """Seconds for one forward: the slower of memory and compute, plus launch overhead."""
    if query_tokens <= 0:
        return 0.0
    if callable(weight_bytes):
        weight_bytes = weight_bytes(query_tokens)
    t_mem = (weight_bytes + kv_read_bytes) / device.bandwidth_bps
    t_comp = 2.0 * active_params * query_tokens / device.flops
    return max(t_mem, t_comp) + launch_s


@dataclass(frozen=True)
class StepLoad:
    """What one engine step does."""

    decode_seqs: int = 0  # sequences past prefill that produce tokens this step
    drafting_seqs: int = 0  # of those, how many carry draft tokens
    draft_tokens: int = 0  # total draft tokens proposed (sum of k over drafting sequences)
    k: int = 0  # draft length (sequential drafter forwards)
    prefill_tokens: int = 0  # prompt tokens computed this step (chunked prefill)
    kv_tokens: int = 0  # context tokens whose KV is read (all scheduled sequences)

    @property
    def target_tokens(self) -> int:
        return self.decode_seqs + self.draft_tokens + self.prefill_tokens


@dataclass(frozen=True)
class StepCost:
    draft_s: float
    target_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return self.draft_s + self.target_s + self.overhead_s


@dataclass(frozen=True)
class TimingModel:
    device: DeviceProfile
    target: ModelSpec
    kv_bytes_per_token: int  # target KV bytes per token at the served KV dtype
    weight_scale: float = 1.0  # served dtype vs catalog weights (float32 = 2.0)
    eager: bool = False
    spec_kind: str = "none"  # one of SPEC_KINDS
    draft: ModelSpec | None = None  # the head or draft model
    draft_kv_bytes_per_token: int = 0
    overlap_scheduler: bool = False
    variant: str = "chain"  # "measured": drafting cost concave in k (CONCAVE)

    def launch_s(self, layers: int) -> float:
        if self.eager:
            return layers * KERNELS_PER_LAYER * self.device.kernel_launch_s
        return self.device.graph_launch_s

    def target_forward(self, query_tokens: int, kv_tokens: int) -> float:
        t = self.target
        return forward_time(
            self.device,
            weight_bytes=lambda n: t.forward_bytes(n) * self.weight_scale,
            active_params=t.active_params,
            query_tokens=query_tokens,
            kv_read_bytes=kv_tokens * self.kv_bytes_per_token,
            launch_s=self.launch_s(t.layers),
        )

    def draft_time(self, load: StepLoad) -> float:
        """Drafter seconds for one step."""
        kind, d = self.spec_kind, self.draft
        b = load.drafting_seqs
        if kind == "none" or (b == 0 and load.prefill_tokens == 0):
            return 0.0
        if kind == "lookup":
            return b * LOOKUP_CPU_S * self.device.cpu_factor
        if d is None:
            return 0.0
        per_seq_ctx = load.kv_tokens / max(1, load.decode_seqs + (1 if load.prefill_tokens else 0))
        kv_read = b * per_seq_ctx * self.draft_kv_bytes_per_token
        common = {"weight_bytes": d.decode_bytes, "active_params": d.active_params,
                  "launch_s": self.launch_s(d.layers)}
        if kind == "parallel_head":
            return forward_time(self.device, query_tokens=max(b, 1) + load.prefill_tokens,
                                kv_read_bytes=0.0, **common) + \
                DRAFT_FORWARD_X * self.device.sched_overhead_s
        if b == 0:  # only prompts to ingest (draft model / EAGLE hidden states)
            return forward_time(self.device, query_tokens=load.prefill_tokens,
                                kv_read_bytes=0.0, **common)
        total = 0.0
        floor = DRAFT_FORWARD_X * self.device.sched_overhead_s
        for i in range(max(load.k, 1)):
            q = b + (load.prefill_tokens if i == 0 else 0)
            total += forward_time(self.device, query_tokens=q, kv_read_bytes=kv_read,
                                  **common) + floor
        if self.variant == "measured" and load.k >= 1:
            total *= (load.k / 2.0) ** (CONCAVE - 1.0)
        return total

    def step_time(self, load: StepLoad) -> StepCost:
        target = self.target_forward(load.target_tokens, load.kv_tokens)
        draft = self.draft_time(load)
        cpu = 0.3 if self.overlap_scheduler else 1.0  # TRT-LLM's overlap scheduler hides most
        sched = self.device.sched_overhead_s * cpu
        if load.draft_tokens:
            sched += SPEC_STEP_X * self.device.sched_overhead_s * cpu
        return StepCost(draft_s=draft, target_s=target, overhead_s=sched)
