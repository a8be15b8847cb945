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

import torch

CHECKPOINT = Path(__file__).resolve().parent.parent / "data" / "llama_shakespeare"

# The chat format of SmolLM2, Qwen2 and many others (ChatML), as a Jinja template like the one in a
# tokenizer_config.json: each message between <|im_start|>role and <|im_end|>, and with
# add_generation_prompt an open assistant turn, which the model completes.
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# The shipped model read plays, not chats: its "chat template" is a scene, the user's lines spoken by
# JULIET and the model's by ROMEO, each a speaker's name in capitals and a full stop, as in the text.
PLAY_TEMPLATE = (
    "{% for message in messages %}{{ 'JULIET' if message['role'] == 'user' else 'ROMEO' }}.\n"
    "{{ message['content'] }}\n\n{% endfor %}{% if add_generation_prompt %}ROMEO.\n{% endif %}"
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


def chat_text(messages, folder=CHECKPOINT, template=None):
    """The text a chat model reads for ``messages`` ([{"role", "content"}]), ending where the model's
    answer begins: ``template`` (Jinja), by default the one in the checkpoint's tokenizer_config.json,
    rendered by transformers."""
    from transformers import PreTrainedTokenizerFast

    if template is None:
        template = json.loads((Path(folder) / "tokenizer_config.json").read_text())["chat_template"]
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(Path(folder) / "tokenizer.json"))
    return tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False,
                                         add_generation_prompt=True)


def in_model_dtype(model):
    """A transformers Llama whose rotary angles and RMSNorms run in the model's dtype, as the course's do.

    Stock transformers computes both in float32 whatever the model's dtype (cheap insurance for
    bfloat16 models), so a float64 model agrees with the course's to ~1e-7 only; with this, to
    rounding (~1e-15): the remaining difference is the architecture's, and there is none.
    """
    import types

    def rotary(self, x, position_ids):
        head_dim = 2 * self.inv_freq.numel()
        two_i = torch.arange(0, head_dim, 2, dtype=torch.float64, device=x.device)
        angles = position_ids[..., None].to(torch.float64) * self.config.rope_parameters["rope_theta"] ** (
            -two_i / head_dim)  # (B, T, D/2)
        both = torch.cat([angles, angles], dim=-1)  # (B, T, D): feature i and i + D/2 turn together
        return both.cos().to(x.dtype), both.sin().to(x.dtype)

    def norm(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    for module in model.modules():
        if type(module).__name__ == "LlamaRotaryEmbedding":
            module.forward = types.MethodType(rotary, module)
        elif type(module).__name__ == "LlamaRMSNorm":
            module.forward = types.MethodType(norm, module)
    return model


def hub_checkpoint(repo_id):
    """Download a model's config, weights and tokenizer from the Hugging Face hub (needs a network); its folder."""
    from huggingface_hub import snapshot_download

    files = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    return Path(snapshot_download(repo_id, allow_patterns=files))
