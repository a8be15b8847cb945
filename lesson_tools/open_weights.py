"""Lesson 09's checkpoint and what the lesson gives around it: files, tokenizer, chat template.

    from lesson_tools import open_weights
    config = open_weights.read_config()            # config.json of the shipped Shakespeare Llama, a dict
    state_dict = open_weights.read_weights()       # model.safetensors: {Hugging Face name: tensor}
    tokenizer = open_weights.load_tokenizer()      # tokenizer.json: byte-level BPE, 1024 tokens
    ids = tokenizer.encode("ROMEO.").ids

Every function takes the folder of a checkpoint in the Hugging Face layout, the shipped one
(data/llama_shakespeare/, built by its build.py) by default, so the same lines read a model
downloaded from the hub with ``hub_checkpoint``. Nothing here downloads unless asked to, and
nothing here knows the lesson's answers: the student writes the model and the loader.
"""

import json
from pathlib import Path

CHECKPOINT = Path(__file__).resolve().parent.parent / "data" / "llama_shakespeare"

# The chat format of SmolLM2, Qwen2 and many others (ChatML), as a Jinja template like the one in a
# tokenizer_config.json: each message between <|im_start|>role and <|im_end|>, and with
# add_generation_prompt an open assistant turn, which the model completes.
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def read_config(folder=CHECKPOINT):
    """config.json as a dict."""
    return json.loads((Path(folder) / "config.json").read_text())


def read_weights(folder=CHECKPOINT):
    """model.safetensors as {name: tensor}: only tensors, so reading it runs no code (a pickled .bin can)."""
    from safetensors.torch import load_file

    return load_file(Path(folder) / "model.safetensors")


def load_tokenizer(folder=CHECKPOINT):
    """tokenizer.json as a Hugging Face ``tokenizers.Tokenizer`` (encode(text).ids, decode(ids))."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))


def chat_text(messages, template=CHATML_TEMPLATE, folder=CHECKPOINT):
    """The text a chat model reads for ``messages`` ([{"role", "content"}]), ending with an open
    assistant turn: the template rendered as transformers' apply_chat_template renders it."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(Path(folder) / "tokenizer.json"))
    return tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False,
                                         add_generation_prompt=True)


def hub_checkpoint(repo_id):
    """Download a model's config, weights and tokenizer from the Hugging Face hub (needs a network); its folder."""
    from huggingface_hub import snapshot_download

    files = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    return Path(snapshot_download(repo_id, allow_patterns=files))
