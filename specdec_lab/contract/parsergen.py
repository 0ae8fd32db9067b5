"""The engine emulator's vLLM parser data, generated from each pinned release's own code.

``python3 -m specdec_lab.contract.parsergen [--check] [VERSION...]`` (default: every vLLM
release the catalog pins) builds or reuses the release's contract environment
(`installer`), runs `vllm_parser` inside it on `PROBES` and writes
``specdec_lab/contract/parsers/vllm-X.json``; with ``--check`` it writes nothing and prints how
the committed file differs from what the release says now (exit 1), which the contract test
``tests/contract/test_parser_data.py`` asserts is nothing. The emulator
(`specdec_lab.emulator.vllm_release`) reads these files and nothing of `specdec.engines`.

Each probe is one ``vllm serve`` command line; its id names what the emulator quotes it for.
Its values are chosen to be unique in the texts they produce (k -3, key ``no_such_key`` = 17, a
draft ``max_model_len`` of 999999), so the emulator can put its own values in their place.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from specdec.catalog import Catalog, load_catalog
from specdec_lab.contract.cases import pinned_versions
from specdec_lab.contract.controls import HEAD_PREFIX, arch_targets
from specdec_lab.contract.installer import InstallError, ensure_vllm, lock_file
from specdec_lab.contract.models import configs, generic_head

__all__ = ["PARSERS", "PROBES", "generate", "parser_file", "render", "stale"]

PARSERS = Path(__file__).resolve().parent / "parsers"
EXTRACTOR = Path(__file__).resolve().parent / "vllm_parser.py"
TIMEOUT = 1200
L8 = "meta-llama/Llama-3.1-8B-Instruct"
Q8 = "Qwen/Qwen3-8B"
DRAFT = "Qwen/Qwen3-0.6B"
HEAD = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
SPECULATORS_HEAD = "RedHatAI/Qwen3-8B-speculator.eagle3"
ARCH = "eagle3-arch/"  # + architecture: eagle3 with a reference-format head on that target
_NG = {"method": "ngram", "num_speculative_tokens": 3}
_DM = {"method": "draft_model", "model": DRAFT, "num_speculative_tokens": 3}

# id -> (target, --speculative-config (a dict, or the raw text), further flags)
PROBES: dict[str, tuple[str, dict[str, Any] | str | None, tuple[str, ...]]] = {
    "method/ngram": (L8, _NG, ()),
    "ngram-min-only": (L8, {**_NG, "prompt_lookup_min": 2}, ()),
    "ngram-max-only": (L8, {**_NG, "prompt_lookup_max": 4}, ()),
    "not-dict": (L8, "[1]", ()),
    "unknown-key": (L8, {**_NG, "no_such_key": 17}, ()),
    "tp-key": (L8, {**_NG, "tensor_parallel_size": 1}, ()),
    "bad-method": (L8, {**_NG, "method": "no_such_method"}, ()),
    "model-int": (L8, {**_DM, "model": 1}, ()),
    "k-neg": (L8, {**_NG, "num_speculative_tokens": -3}, ()),
    "k-str": (L8, {**_NG, "num_speculative_tokens": "x"}, ()),
    "k-float": (L8, {**_NG, "num_speculative_tokens": 1.5}, ()),
    "no-k": (L8, {"method": "ngram"}, ()),
    "plmin-gt": (L8, {**_NG, "prompt_lookup_min": 5, "prompt_lookup_max": 2}, ()),
    "plmin-0": (L8, {**_NG, "prompt_lookup_min": 0, "prompt_lookup_max": 2}, ()),
    "plmax-0": (L8, {**_NG, "prompt_lookup_min": 1, "prompt_lookup_max": 0}, ()),
    "method/draft_model": (Q8, _DM, ()),
    "method/suffix": (L8, {"method": "suffix", "num_speculative_tokens": 3}, ()),
    "method/mtp": (L8, {"method": "mtp", "num_speculative_tokens": 1}, ()),
    "method/ngram_gpu": (L8, {**_NG, "method": "ngram_gpu"}, ()),
    "method/eagle": (L8, {"method": "eagle", "model": HEAD, "num_speculative_tokens": 3}, ()),
    "method/eagle3": (L8, {"method": "eagle3", "model": HEAD, "num_speculative_tokens": 3}, ()),
    "guess-eagle3-name": (L8, {"model": HEAD, "num_speculative_tokens": 3}, ()),
    "draft-no-model": (Q8, {"method": "draft_model", "num_speculative_tokens": 3}, ()),
    "draft-no-k": (Q8, {"method": "draft_model", "model": DRAFT}, ()),
    "draft-vocab": (L8, _DM, ()),
    "draft-maxlen": (Q8, {**_DM, "max_model_len": 999999}, ()),
    "draft-maxlen-target": (Q8, {**_DM, "max_model_len": 8192}, ()),
    "dtp": (Q8, {**_DM, "draft_tensor_parallel_size": 2}, ()),
    "head-speculators": (Q8, {"method": "eagle3", "model": SPECULATORS_HEAD,
                              "num_speculative_tokens": 3}, ()),
    "max-model-len": (L8, None, ("--max-model-len", "999999")),
    "unknown-flag": (L8, None, ("--no-such-flag",)),
    "bad-int": (L8, None, ("--max-num-seqs", "x")),
    "bad-choice": (L8, None, ("--dtype", "nope")),
}


def probe_argv(target: str, spec: dict[str, Any] | str | None, flags: tuple[str, ...]
               ) -> list[str]:
    argv = ["vllm", "serve", target, *flags]
    if "--max-model-len" not in flags:
        argv += ["--max-model-len", "4096"]
    if spec is not None:
        text = spec if isinstance(spec, str) else json.dumps(spec, separators=(",", ":"))
        argv += ["--speculative-config", text]
    return argv


def probes(cat: Catalog) -> list[dict[str, Any]]:
    out = [{"id": pid, "argv": probe_argv(*p)} for pid, p in PROBES.items()]
    for arch, (repo, _, _) in sorted(arch_targets(cat).items()):
        spec = {"method": "eagle3", "model": HEAD_PREFIX + arch, "num_speculative_tokens": 3}
        out.append({"id": ARCH + arch, "argv": probe_argv(repo, spec, ())})
    return out


def extractor_input(cat: Catalog) -> dict[str, Any]:
    models = configs(cat)
    for arch, (repo, _, _) in arch_targets(cat).items():
        models[HEAD_PREFIX + arch] = generic_head(models[repo])
    return {"models": models, "probes": probes(cat), "architectures": sorted(arch_targets(cat))}


def _run(venv: Path, data: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="specdec-parsergen-") as tmp:
        inp, out = Path(tmp) / "input.json", Path(tmp) / "output.json"
        inp.write_text(json.dumps(data))
        proc = subprocess.run([str(venv / "bin" / "python"), "-I", str(EXTRACTOR), "--input",
                               str(inp), "--output", str(out)], capture_output=True, text=True,
                              timeout=TIMEOUT, check=False)
        if proc.returncode != 0 or not out.is_file():
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise InstallError(f"vllm_parser failed in {venv} (exit {proc.returncode}):\n{tail}")
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def generate(version: str, cat: Catalog | None = None) -> dict[str, Any]:
    """The parser data of vLLM ``version``, from its contract environment (built if needed)."""
    lock = lock_file("vllm", version)
    venv = ensure_vllm(version, log=lambda m: print(f"[parsergen] {m}", file=sys.stderr))
    out = _run(venv, extractor_input(cat or load_catalog()))
    if str(out["version"]).split("+")[0] != version:
        raise InstallError(f"{venv} runs vLLM {out['version']}, not {version}")
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    return {"generated_by": f"python3 -m specdec_lab.contract.parsergen {version}",
            "release": f"vllm=={version} from PyPI, {lock.parent.name}/{lock.name} "
                       f"(sha256 {digest}...)", **out}


def render(data: dict[str, Any]) -> str:
    """JSON with one line per option, probe and architecture (reviewable diffs)."""
    lines = ["{"]
    keys = list(data)
    for i, key in enumerate(keys):
        value = data[key]
        end = "," if i < len(keys) - 1 else ""
        if isinstance(value, list) and value:
            items = [json.dumps(v, sort_keys=True) for v in value]
            lines.append(f" {json.dumps(key)}: [")
            lines += [f"  {x}," for x in items[:-1]] + [f"  {items[-1]}", f" ]{end}"]
        elif isinstance(value, dict) and value:
            lines.append(f" {json.dumps(key)}: {{")
            sub = list(value.items())
            for j, (k, v) in enumerate(sub):
                lines.append(f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}"
                             + ("," if j < len(sub) - 1 else ""))
            lines.append(f" }}{end}")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value, sort_keys=True)}{end}")
    return "\n".join(lines) + "\n}\n"


def parser_file(version: str) -> Path:
    return PARSERS / f"vllm-{version}.json"


def stale(version: str, text: str) -> list[str]:
    """How the committed file differs from ``text`` (a unified diff; [] when identical)."""
    path = parser_file(version)
    have = path.read_text() if path.is_file() else ""
    return list(difflib.unified_diff(have.splitlines(), text.splitlines(), str(path),
                                     f"vLLM {version} now", lineterm="", n=1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m specdec_lab.contract.parsergen",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare, write nothing")
    ap.add_argument("versions", nargs="*")
    opts = ap.parse_args(argv)
    cat = load_catalog()
    bad = 0
    for v in opts.versions or pinned_versions("vllm", cat):
        try:
            text = render(generate(v, cat))
        except InstallError as exc:
            print(f"vLLM {v}: {exc}")
            bad += 1
            continue
        diff = stale(v, text)
        if opts.check:
            print("\n".join(diff) if diff else f"{parser_file(v).name}: identical")
            bad += bool(diff)
        else:
            PARSERS.mkdir(exist_ok=True)
            parser_file(v).write_text(text)
            print(f"{parser_file(v)}: {'written' if diff else 'unchanged'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
