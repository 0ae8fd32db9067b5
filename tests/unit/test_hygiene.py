"""specdec.config.hygiene and the redaction: the grammars against their sources, managed flags,
shown values, and the last lines of defence in render, verify and report."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from specdec.config import hygiene
from specdec.config.hftoken import read_token
from specdec.engines.registry import engine as engine_named
from specdec.errors import ConfigError, RenderError, redact
from specdec.fleet.plans import plan_fleet
from specdec.host import layout, release
from specdec.plan.planner import make_plan
from specdec.render.files import render
from specdec.render.unitfile import unit_text
from specdec.report.fleet import write_host_report
from tests.waiting import flock_waiters, wait_until

TOK = "hf_" + "Xyz789" * 5


def test_line_breaks_are_exactly_what_splitlines_breaks_on() -> None:
    computed = {chr(i) for i in range(0x110000)
                if i < 0xD800 or i > 0xDFFF if len(f"a{chr(i)}b".splitlines()) > 1}
    assert computed == set(hygiene.LINE_BREAKS)
    for c in computed:
        assert hygiene.bad_char(f"ok{c}") == f"U+{ord(c):04X}"
    assert hygiene.bad_char("Qwen/Qwen3-0.6B é ü 中") is None
    assert hygiene.bad_char("a\u200bb") == "U+200B"  # zero-width space (Cf)
    assert hygiene.bad_char("a\u2066b") == "U+2066"  # bidi isolate (Cf)


# huggingface_hub 2.4.0, huggingface_hub/utils/_validators.py (REPO_ID_REGEX, validate_repo_id),
# verbatim, as the reference our re-statement must agree with.
_HF_REGEX = re.compile(r"""
    (\b[\w\-.]{1,96}\b/)? # optional namespace (username or organization)
    \b               # starts with a word boundary
    [\w\-.]{1,96}    # repo_name: alphanumeric + . _ -
    \b               # ends with a word boundary
    """, flags=re.VERBOSE | re.ASCII)


def _hf_valid(repo_id: str) -> bool:
    return (repo_id.count("/") <= 1 and bool(_HF_REGEX.fullmatch(repo_id))
            and "--" not in repo_id and ".." not in repo_id and not repo_id.endswith(".git"))


@pytest.mark.parametrize("repo_id", [
    "gpt2", "Qwen/Qwen3-0.6B", "meta-llama/Llama-3.1-8B-Instruct", "a/b", "_x/_y", "x_/y_",
    "1/2", "org/" + "n" * 96, "o" * 96 + "/n", "org/" + "n" * 97, "-org/name", "org/name-",
    ".org/name", "org/.name", "org/name.", "org--x/n", "org/n..x", "org/n.git", "a/b/c", "",
    "/name", "org/", "org/na me", "org/naïve", "org/n\u2028", "--trust-remote-code", "../../etc",
    "org/n-x.y_z", "a.b/c-d", "org/x" * 2,
])
def test_repo_id_agrees_with_huggingface_hub(repo_id: str) -> None:
    try:
        hygiene.check_repo_id("h", "k", repo_id)
        ours = True
    except ConfigError:
        ours = False
    assert ours == _hf_valid(repo_id)


def test_catalog_ids_are_repo_ids() -> None:
    from specdec.catalog import load_catalog

    cat = load_catalog()
    for repo in [*cat.models, *cat.heads]:
        hygiene.check_repo_id("catalog", "id", repo)


@pytest.mark.parametrize("image", [
    "vllm:1", "dustynv/vllm:0.9.2-r36.4-cu128-24.04", "nvcr.io/nvidia/vllm:25.11-py3",
    "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6", "localhost:5000/specdec/vllm-emu:abc",
    "localhost:5000/specdec/vllm-emu:abc@sha256:" + "0" * 64, "r/vllm@sha256:" + "a" * 64,
    "Registry.Example:443/a__b/c--d/e.f:Tag_1", "[::1]:5000/a:1", "a.b-c/d_e:1",
])
def test_valid_image_references(image: str) -> None:
    assert hygiene.check_image("h", "k", image) == image


@pytest.mark.parametrize("image", [
    "-eX/vllm:1", "a/-b:1", "a/b-:1", "a/_b:1", "A/b/C:1", "a:1:2", "a b:1", "a/b:.1",
    "a/b:" + "t" * 129, "-x.io/a:1", "x-.io/a:1", "a//b:1", "a/b:1@sha256:" + "0" * 63,
    "a/b@sha512:" + "0" * 128, "a/b:latest", "a/b:latest-gpu", "a/b", "--privileged",
])
def test_invalid_image_references(image: str) -> None:
    with pytest.raises(ConfigError, match="^h: k="):
        hygiene.check_image("h", "k", image)


def _managed(arg: str, engine: str) -> tuple[str, str] | None:
    e = engine_named(engine)
    return hygiene.managed_flag(arg, e.managed_flags, e.abbreviated_flags)


@pytest.mark.parametrize(("engine", "arg"), [
    ("vllm", "--enforce-eager"), ("vllm", "--tokenizer=x"),
    ("vllm", "--config-format=hf"), ("vllm", "--model-impl"), ("vllm", "-tp"), ("vllm", "2"),
    ("vllm", "--max-num-batched-tokens=512"), ("vllm", "--compilation-config.level=3"),
    ("vllm", "--"), ("vllm", "-O3"), ("trtllm", "--tp_size"),
    ("trtllm", "--max_num_tokens=8192"), ("trtllm", "--log_level=info"),
])
def test_ordinary_engine_args_pass(engine: str, arg: str) -> None:
    assert _managed(arg, engine) is None


@pytest.mark.parametrize(("engine", "arg", "flag"), [
    ("vllm", "--port", "--port"), ("vllm", "--PORT", None), ("vllm", "--po", "--port"),
    ("vllm", "--served_model", "--served-model-name"), ("vllm", "--host=::", "--host"),
    ("vllm", "--speculative-config.num_speculative_tokens=9", "--speculative-config"),
    ("vllm", "--api-key", "--api-key"), ("vllm", "--api", "--api-key"),
    ("trtllm", "--extra-llm-api-options=x", "--extra_llm_api_options"),
    ("trtllm", "--hf_token", "--hf-token"), ("trtllm", "--token=t", "--token"),
    ("trtllm", "--po", None),  # click takes no abbreviations
    # running the repo's own code only through specdec_trust_remote_code
    ("vllm", "--trust-remote-code", "--trust-remote-code"),
    ("vllm", "--trust_remote_code", "--trust-remote-code"),
    ("trtllm", "--trust_remote_code", "--trust_remote_code"),
    ("dynamo", "--trust-remote-code", "--trust-remote-code"),
])
def test_managed_and_secret_flags(engine: str, arg: str, flag: str | None) -> None:
    hit = _managed(arg, engine)
    assert (hit[0] if hit else None) == flag


def test_show_redacts_before_it_truncates() -> None:
    # the token straddles the cut: redacted first, no part of it is left
    value = "x" * 50 + TOK
    shown = hygiene.show(value)
    assert "Xyz" not in shown and "hf_" not in shown and shown.endswith("… (83 chars)")
    assert hygiene.show("a\nb") == "'a\\nb'"


def test_error_messages_are_one_line_and_redacted() -> None:
    err = ConfigError(f"x\u2028y {TOK}", host="h")
    assert str(err) == "h: x y <redacted>"


def test_render_escapes_percent_and_refuses_line_breaks() -> None:
    plan = make_plan("h1", {"specdec_device": "agx-orin-64gb",
                            "specdec_model": "Qwen/Qwen3-0.6B"})
    odd = dataclasses.replace(plan, model="org/50%x")
    unit = render(odd).unit.content
    assert "Description=specdec vllm engine (org/50%%x," in unit
    assert unit_text("%n") == "%%n"
    for bad in (dataclasses.replace(plan, host="h\nExecStartPre=+/bin/sh"),
                dataclasses.replace(plan, model="org/x\u2028y"),
                dataclasses.replace(plan, service_user="u\x85v")):
        with pytest.raises(RenderError, match="contains a line break or control character"):
            render(bad)


def test_extra_args_with_percent_and_dollar_are_literal_in_the_unit() -> None:
    plan = make_plan("h1", {"specdec_device": "agx-orin-64gb", "specdec_model": "Qwen/Qwen3-0.6B",
                            "specdec_extra_args": ["--chat-template=%H $HOME"]})
    exec_start = next(line for line in render(plan).unit.content.splitlines()
                      if line.startswith("ExecStart="))
    assert "'--chat-template=%%H $$HOME'" in exec_start


def test_journal_line_is_redacted_before_it_is_cut() -> None:
    from specdec.verify.phases.health import journal_reason as _journal_reason

    line = "E" * 190 + " failed: token " + TOK + " rejected"
    kind, reason = _journal_reason(["start", line])
    assert kind == "crash" and reason is not None
    assert "hf_" not in reason and "Xyz" not in reason and len(reason) == 200


def test_reports_redact_token_shaped_strings(tmp_path: Path) -> None:
    rep = {"host": "h1", "outcome": "failed", "message": f"bad {TOK}",
           "events": [{"message": TOK}], "measurements": []}
    write_host_report(tmp_path, rep)
    for p in tmp_path.iterdir():
        assert "Xyz789" not in p.read_text(), p.name
    assert json.loads((tmp_path / "h1.json").read_text())["message"] == "bad <redacted>"


def test_hf_token_sources_share_one_validator(tmp_path: Path) -> None:
    good = "hf_" + "a1" * 17
    f = tmp_path / "t"
    f.write_text(good + "\n")
    assert read_token("h", str(f), {}) == good
    assert read_token("h", None, {"HF_TOKEN": f" {good}\n"}) == good
    assert read_token("h", None, {"HF_TOKEN": "  "}) is None and read_token("h", None, {}) is None
    for raw in (good[:20] + "\n" + good[20:], good + " x", "hf_" + "é" * 30):
        f.write_text(raw)
        with pytest.raises(ConfigError) as from_file:
            read_token("h", str(f), {})
        with pytest.raises(ConfigError) as from_env:
            read_token("h", None, {"HF_TOKEN": raw})
        assert str(from_file.value).split(": ", 2)[2] == str(from_env.value).split(": ", 2)[2]
        assert good[4:12] not in str(from_file.value) + str(from_env.value)


def test_rollout_checks_hosts_with_data_overrides(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no token saved by hf auth login
    inv = tmp_path / "inv.py"
    inv.write_text('hosts = [("a-1", {"specdec_device": "agx-orin-64gb", '
                   '"specdec_model": "Qwen/Qwen3-0.6B"})]\n')
    plan_fleet(str(inv), data=["specdec_reverify=true"])
    with pytest.raises(ConfigError, match="^a-1: specdec_port=1: must be an integer"):
        plan_fleet(str(inv), data=["specdec_port=1"])
    with pytest.raises(ConfigError, match="^a-1: specdec_extra_args\\[0\\]='--port=2'"):
        plan_fleet(str(inv), data=['specdec_extra_args=["--port=2"]'])
    monkeypatch.setenv("HF_TOKEN", "hf_bad token")
    with pytest.raises(ConfigError, match=r"^a-1: \$HF_TOKEN: does not hold a single token"):
        plan_fleet(str(inv))


def test_activate_waits_for_the_guards_lock(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layout, "STATE_DIR", str(tmp_path))
    monkeypatch.setattr(layout, "CURRENT", str(tmp_path / "current"))
    (tmp_path / "releases" / "aaa").mkdir(parents=True)
    lock, held, free = tmp_path / release.GUARD_LOCK, tmp_path / "held", tmp_path / "free"
    # the holder says when it holds the guard's lock, keeps it until told, and says whether
    # `current` moved meanwhile
    holder = subprocess.Popen(
        ["flock", str(lock), "sh", "-c", f"touch {held}; while [ ! -e {free} ]; do sleep 0.02; "
         f"done; if [ -e {tmp_path}/current ]; then echo moved; else echo kept; fi"],
        stdout=subprocess.PIPE, text=True)
    try:
        wait_until(held.exists, "the holder to take the lock")
        act = subprocess.Popen(["sh", "-c", release.activate("aaa")])
        wait_until(lambda: flock_waiters(lock) == 1, "activate to queue for the lock")
        free.touch()
        assert act.wait(timeout=30) == 0
    finally:
        free.touch()
        out = holder.communicate(timeout=30)[0]
    assert out.strip() == "kept"  # it waited for the guard
    assert os.readlink(tmp_path / "current") == "releases/aaa"
    cmd = release.activate("aaa")
    assert "current.activate.tmp" in cmd and "current.guard.tmp" not in cmd


def test_guard_and_commit_use_their_own_temporary_names() -> None:
    from specdec.host import guard

    assert "current.guard.tmp" in guard.script() and "current.activate.tmp" not in guard.script()
    assert "last-good.commit.tmp" in guard.commit_command("aaa")
    assert f"flock -w {release.FLOCK_WAIT_S} " in guard.commit_command("aaa")


def test_redact_replaces_a_given_secret_too() -> None:
    assert redact("a secret-ish value", "secret-ish") == "a <redacted> value"


def test_upper_case_first_component_is_not_a_registry() -> None:
    from specdec.config.hygiene import split_reference

    assert split_reference("Upper/vllm:1") is None  # a path component: must be lower case
    assert split_reference("Registry.Example:5000/team/vllm:1") == (
        "Registry.Example:5000", "team/vllm", "1", None)
