"""The engine emulator as Dynamo's vLLM worker (``python3 -m dynamo.vllm`` in the lab).

The lab's Dynamo installation is the real ai-dynamo from PyPI (frontend, router, runtime); its
``dynamo.vllm`` needs vLLM and a GPU, so the lab binds `main` over ``dynamo/vllm/main.py``.
It takes the worker's command line as Dynamo 1.6.1 does (``dynamo/vllm/args.py``: Dynamo's
argument groups first, with the venv's own parsers, then vLLM's engine flags), emulates the vLLM
release the installed Dynamo pins (its refusals included), starts up as vLLM does (memory,
weights, faults), and then serves as a real Dynamo worker through the venv's
``dynamo.common.backend``: it registers in etcd, serves the TCP request plane and the system
server (health, ``vllm:*`` metrics, the model card), and answers each request with the
emulator's engine core: the same timing model, batching and speculation as ``vllm serve``.

Requests arrive as token ids from the frontend's tokenizer, which is the card
`specdec_lab.emulator.dyntok` writes (ids back to the prompt text; one id per generated token).
Faults: as ``vllm serve`` (``SPECDEC_EMU_FAULT``), ``hang_after`` never answers,
``5xx_burst`` fails the request.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from specdec.engines.dynamo.facts import dynamo_facts
from specdec_lab.emulator import cli_vllm
from specdec_lab.emulator.core import SeqRequest
from specdec_lab.emulator.dyntok import ModelCard, write_model_card
from specdec_lab.emulator.engine import EngineService
from specdec_lab.emulator.openai import GenRequest, _prefix_blocks
from specdec_lab.emulator.runtime import RunContext, ServeConfig, StartupError, make_context
from specdec_lab.emulator.scheduler import SHUTDOWN, Sink
from specdec_lab.emulator.startup import EngineExit, config_failure, vllm_startup
from specdec_lab.emulator.textgen import category_of, count_tokens, stable_int

__all__ = ["main", "vllm_release"]

# `vllm serve` flags that are the API server's, not vLLM's engine arguments (AsyncEngineArgs),
# so dynamo.vllm's parser does not know them.
_SERVER_ONLY = ("--host", "--port", "--api-key", "--root-path", "--uvicorn-log-level",
                "--disable-uvicorn-access-log", "--chat-template", "--enable-prompt-tokens-details")


def vllm_release() -> str:
    """The vLLM release the installed ai-dynamo pins."""
    import importlib.metadata

    version = importlib.metadata.version("ai-dynamo")
    facts = dynamo_facts(version)
    if facts is None:
        raise SystemExit(f"specdec emulator: ai-dynamo {version} is not in specdec's release "
                         "table (specdec/engines/dynamo.py)")
    return str(facts.vllm)


def _parse(argv: list[str], version: str) -> tuple[argparse.Namespace, argparse.Namespace]:
    from dynamo.common.configuration.groups.runtime_args import DynamoRuntimeArgGroup
    from dynamo.vllm.backend_args import DynamoVllmArgGroup

    parser = argparse.ArgumentParser(prog="python3 -m dynamo.vllm", allow_abbrev=False)
    DynamoRuntimeArgGroup().add_arguments(parser)
    DynamoVllmArgGroup().add_arguments(parser)
    dyn, rest = parser.parse_known_args(argv)
    rest = cli_vllm.normalize_argv(rest)
    bad = [a for a in rest if a.split("=", 1)[0] in _SERVER_ONLY]
    positional = [a for a in rest if not a.startswith("-")][:1]
    if bad or (positional and rest.index(positional[0]) == 0):
        parser.error(f"unrecognized arguments: {' '.join(bad or positional)}")
    return dyn, cli_vllm.parse_argv(["serve", *rest], version)


class EmulatedWorker:
    """The `dynamo.common.backend.LLMEngine` contract around one `EngineService`."""

    def __init__(self, cfg: ServeConfig, ctx: RunContext, service: EngineService,
                 card: ModelCard, card_dir: Path) -> None:
        self.cfg, self.ctx, self.service, self.card, self.card_dir = (
            cfg, ctx, service, card, card_dir)

    async def start(self, worker_id: int) -> Any:
        from dynamo.common.backend.engine import EngineConfig, LlmRegistration

        setup, mem = self.cfg.setup, self.service.mem
        spec = ({"nextn": setup.k, "method": setup.method, "source": "backend_config"}
                if setup.speculative else None)
        return EngineConfig(
            model=str(self.card_dir), served_model_name=self.cfg.served_model_names[0],
            runtime_data={"spec_decode": spec} if spec else None,
            llm=LlmRegistration(context_length=setup.model_len, kv_cache_block_size=16,
                                total_kv_blocks=mem.num_blocks, max_num_seqs=setup.max_num_seqs,
                                max_num_batched_tokens=setup.batched_tokens))

    def _request(self, request: dict[str, Any]) -> GenRequest:
        text = self.card.text_of(list(request.get("token_ids") or []))
        stop = request.get("stop_conditions") or {}
        sampling = request.get("sampling_options") or {}
        temp = sampling.get("temperature")
        prompt = max(1, count_tokens(text))
        max_tokens = stop.get("max_tokens") or max(1, self.cfg.setup.model_len - prompt)
        seq = SeqRequest(
            prompt_key=stable_int("chat", text), prompt_tokens=prompt,
            category=category_of(text), max_tokens=int(max_tokens),
            min_tokens=int(stop.get("min_tokens") or 0), ignore_eos=bool(stop.get("ignore_eos")),
            temperature=float(temp if temp is not None else self.cfg.default_temperature),
            seed=sampling.get("seed"), prefix_blocks=_prefix_blocks(text, prompt))
        gen = GenRequest(kind="chat", model=self.cfg.served_model_names[0], stream=True,
                         include_usage=True, continuous_usage=False)
        gen.seqs.append(seq)
        gen.choice_of.append(0)
        gen.prompt_tokens.append(prompt)
        gen.categories.append(seq.category)
        return gen

    async def generate(self, request: dict[str, Any], context: Any
                       ) -> AsyncGenerator[dict[str, Any], None]:
        svc = self.service
        n = svc.next_request()
        if self.ctx.faults.is_5xx(n):
            raise RuntimeError("specdec emulator: 5xx_burst fault")
        if svc.hung:
            while True:  # hang_after: accepted, never answered
                await asyncio.sleep(3600)
        gen = self._request(request)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        sink: Sink = Sink()
        st, events = svc.generate(gen, time.perf_counter(), sink)
        done = object()

        def pump() -> None:
            try:
                for ev in events:
                    loop.call_soon_threadsafe(queue.put_nowait, ev)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, done)

        loop.run_in_executor(None, pump)
        first = last = None
        finished = False
        try:
            while not context.is_stopped():
                ev = await queue.get()
                if ev is done:
                    finished = True
                    break
                out = ev.out
                first = first or ev.t
                last = ev.t
                ids = [i for tok in out.tokens for i in self.card.ids_of(tok)]
                chunk: dict[str, Any] = {"token_ids": ids, "index": 0}
                if out.finished:
                    chunk["finish_reason"] = "length" if out.finish_reason == "length" else "stop"
                    chunk["completion_usage"] = {
                        "prompt_tokens": out.prompt_tokens, "completion_tokens": out.generated,
                        "total_tokens": out.prompt_tokens + out.generated,
                        "prompt_tokens_details": {"cached_tokens": out.cached_tokens}}
                yield chunk
        finally:
            if not finished:  # the client went away (or the worker stops): free the sequence
                svc.scheduler.abort(st.ids)
                sink.put(SHUTDOWN)
            svc.finish(st, first=first, last=last, end=time.perf_counter())

    async def register_prometheus(self, metrics: Any) -> None:
        vllm = self.service.vllm
        if vllm is not None:
            metrics.register_prometheus_expfmt_callback(vllm.render)

    async def cleanup(self) -> None:
        self.service.stop()


def _engine_class() -> type:
    from dynamo.common.backend.engine import LLMEngine

    class Engine(EmulatedWorker, LLMEngine):
        @classmethod
        async def from_args(cls, argv: list[str] | None = None) -> Any:
            raise NotImplementedError("constructed by specdec_lab.emulator.dynamo_worker.main")

    return Engine


def main(argv: list[str] | None = None) -> int:
    """``python3 -m dynamo.vllm ...`` (the lab's stand-in); the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    version = vllm_release()
    dyn, vargs = _parse(args, version)
    try:
        ctx = make_context("vllm", None, None)
    except Exception as exc:  # noqa: BLE001 - a bad emulator knob: one line, exit 1
        print(f"specdec emulator: error: {exc}", file=sys.stderr)
        return 1
    try:
        cfg = cli_vllm.config_from_args(vargs, seed=ctx.seed, device_id=ctx.device.id,
                                        device=ctx.device, version=version)
    except StartupError as exc:
        return config_failure(ctx, "vllm", exc.root).code
    try:
        mem = vllm_startup(cfg, ctx)
    except EngineExit as exc:
        return exc.code
    service = EngineService(cfg, ctx, mem)
    target = cfg.setup.target
    card_dir = _card_dir(cfg.served_model_names[0])
    card = write_model_card(card_dir, target.tokenizer, target.config_architecture,
                            target.model_type, cfg.setup.model_len)
    service.start()
    return _serve(dyn, cfg, ctx, service, card, card_dir)


def _card_dir(model: str) -> Path:
    """Where the model card goes: the same path on every member, as a real worker's model path
    (the Hub id's snapshot) is. The frontend accepts a second worker for a model only if its
    card has the first one's checksum, and the card's path is part of it (with a random
    temporary directory, ``Rejected incompatible workers`` in the frontend's log)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "--" for c in model)
    path = Path(tempfile.gettempdir()) / "specdec-dynamo-card" / safe
    path.mkdir(parents=True, exist_ok=True)
    return path


def _serve(dyn: argparse.Namespace, cfg: ServeConfig, ctx: RunContext, service: EngineService,
           card: ModelCard, card_dir: Path) -> int:
    import uvloop
    from dynamo.common.backend.worker import Worker, WorkerConfig

    engine = _engine_class()(cfg, ctx, service, card, card_dir)
    wc = WorkerConfig.from_runtime_config(dyn, model_name=str(card_dir),
                                          served_model_name=cfg.served_model_names[0])
    ctx.log.info(f"Dynamo worker for {cfg.served_model_names[0]} (emulated vLLM "
                 f"{cfg.engine_version} on {ctx.device.id})", where="dynamo_worker.py")
    uvloop.run(Worker(engine, wc).run())
    return 0
