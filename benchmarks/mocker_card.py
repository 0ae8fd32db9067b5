"""A model directory for Dynamo's mocker: a trained byte-level BPE tokenizer, config, no weights.

Run with the lab's Dynamo venv (it has ``tokenizers``): ``python3 mocker_card.py OUTDIR``.
The mocker emits token ids drawn from the tokenizer's vocabulary; with the emulator's card
(`specdec_lab.emulator.dyntok`: single bytes, no merges) most ids are lone bytes of multi-byte
UTF-8 sequences and the frontend's detokenizer returns empty text (measured: 16 completion
tokens, content null), so the mocker gets a tokenizer whose ids decode to text on their own.
The training corpus is the interpreter's own stdlib sources: offline and always present.
"""

import glob
import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|pad|>"]
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
            "<|end_header_id|>\n\n{{ m['content'] }}<|eot_id|>{% endfor %}"
            "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
            "{% endif %}")


def write(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4096, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))[:80], trainer)
    tok.save(os.path.join(out, "tokenizer.json"))
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    docs = {
        "tokenizer_config.json": {"bos_token": SPECIALS[0], "eos_token": "<|eot_id|>",
                                  "pad_token": "<|pad|>", "model_max_length": 8192,
                                  "tokenizer_class": "PreTrainedTokenizerFast",
                                  "chat_template": TEMPLATE},
        "config.json": {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                        "vocab_size": tok.get_vocab_size(), "max_position_embeddings": 8192,
                        "bos_token_id": ids[SPECIALS[0]], "eos_token_id": ids["<|eot_id|>"],
                        "torch_dtype": "bfloat16", "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                        "tie_word_embeddings": True},
        "generation_config.json": {"bos_token_id": ids[SPECIALS[0]],
                                   "eos_token_id": [ids["<|eot_id|>"], ids["<|end_of_text|>"]]},
    }
    for name, doc in docs.items():
        with open(os.path.join(out, name), "w") as fh:
            json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    write(sys.argv[1])
