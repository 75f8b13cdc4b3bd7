"""The small BPE tokenizer a check's model directory gets (entrypoint/gpu_check/models.py).

A BPE `tokenizer.json` trained here on a built-in corpus (ids below VOCAB_SIZE) and a
`tokenizer_config.json` with a ChatML chat template (the Qwen layout): enough for vLLM
to serve any config.json with `--load-format dummy`.  The tiny test models of
devtools/tiny_model.py use the same one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VOCAB_SIZE = 1024
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{%- if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{%- endif %}"
    "# Tools\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools><|im_end|>\n"
    "{%- elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role != 'system' or not loop.first %}"
    "<|im_start|>{{ message.role }}\n"
    "{%- if message.content is string %}{{ message.content }}"
    "{%- elif message.content %}{%- for part in message.content %}"
    "{%- if part.type == 'text' %}{{ part.text }}{%- endif %}{%- endfor %}"
    "{%- endif %}"
    "{%- if message.tool_calls %}{%- for call in message.tool_calls %}"
    "\n<tool_call>{{ call.function | tojson }}</tool_call>{%- endfor %}{%- endif %}"
    "<|im_end|>\n"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)

_CORPUS_WORDS = (
    "the a an of to in is are was be on for with as by at from this that it you we they "
    "system user assistant tool tools call function result error file line code test run "
    "model token tokens cache prefix memory budget gpu cpu spark serve request response "
    "time date today now id json schema name type string number object array value key "
    "hello world please answer question thanks help read write list find search open close "
    "0 1 2 3 4 5 6 7 8 9 : - / . , ; ( ) [ ] { } \" ' = + * # _ T Z"
).split()


def _corpus() -> list[str]:
    lines = []
    for i, word in enumerate(_CORPUS_WORDS):
        rest = " ".join(_CORPUS_WORDS[(i * 7 + j) % len(_CORPUS_WORDS)] for j in range(12))
        lines.append(f"{word} {rest}")
    lines.append("2026-11-29T09:30:56Z 550e8400-e29b-41d4-a716-446655440000 deadbeefcafe")
    return lines * 4


def _tokenizer_json() -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - 64,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    return str(tokenizer.to_str())


def _tokenizer_config() -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1 << 20,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(i): {
                "content": tok,
                "special": True,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "single_word": False,
            }
            for i, tok in enumerate(SPECIAL_TOKENS)
        },
    }


def write_tokenizer(out_dir: Path) -> None:
    """The small BPE tokenizer (ids below VOCAB_SIZE) and its ChatML config, into out_dir:
    enough for vLLM to serve any config.json with `--load-format dummy`."""
    (out_dir / "tokenizer.json").write_text(_tokenizer_json())
    (out_dir / "tokenizer_config.json").write_text(json.dumps(_tokenizer_config(), indent=2))
