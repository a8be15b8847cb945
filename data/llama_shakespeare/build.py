"""Build the small Llama checkpoint that lesson 09 loads: a byte-level BPE tokenizer and a
Llama-architecture model, both trained here on the course's Shakespeare text.

    python data/llama_shakespeare/build.py            # (re)write config.json, model.safetensors, tokenizer*.json
    python data/llama_shakespeare/build.py --check    # rebuild in a temporary folder and compare

The tokenizer is Hugging Face ``tokenizers``' byte-level BPE (GPT-2's and Llama 3's kind: any
text encodes, no unknown token) with 1024 tokens, trained on the training split of
data/shakespeare/shakespeare.txt. The model is ``transformers.LlamaForCausalLM``, so the files
are what ``save_pretrained`` writes for any Llama on the hub: grouped-query attention (4 query
heads, 2 key/value heads), a tied embedding, rope_theta 10 000. It trains with lesson 07's
recipe (``train`` of the course's language_data: AdamW, warm-up and cosine decay, random
windows of the training split), one CPU thread, seeded, for a few minutes: enough to write
recognisable verse, far from a good model. The same torch and transformers give the same bytes.
"""

import argparse
import filecmp
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from lesson_tools.language_data import TrainConfig, load_text, split_text, train  # noqa: E402
from lesson_tools.open_weights import PLAY_TEMPLATE  # noqa: E402

SEED = 0
VOCAB_SIZE = 1024
END_OF_TEXT = "<|endoftext|>"
# The model: about 0.87 M parameters, 3.5 MB in float32.
MODEL = dict(vocab_size=VOCAB_SIZE, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
             num_hidden_layers=4, intermediate_size=352, max_position_embeddings=512, rms_norm_eps=1e-5,
             rope_theta=10000.0, tie_word_embeddings=True)
RECIPE = TrainConfig(steps=500, batch_size=16, block_size=128, peak_lr=3e-3, warmup=50, num_threads=1)
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def train_tokenizer(text):
    """A byte-level BPE tokenizer of VOCAB_SIZE tokens, END_OF_TEXT first (id 0)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[END_OF_TEXT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(text.split("\n\n"), trainer)  # one speech at a time: merges stay inside them
    return tokenizer


class _Logits(nn.Module):
    """transformers' model as the course's training loop wants it: ids (B, T) -> logits (B, T, V)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids).logits


def build(folder, progress=True):
    """Train the tokenizer and the model and write FILES into ``folder``; returns the training figures."""
    from transformers import LlamaConfig, LlamaForCausalLM

    start = time.perf_counter()
    train_text, _ = split_text(load_text())
    tokenizer = train_tokenizer(train_text)
    ids = torch.tensor(tokenizer.encode(train_text).ids)  # (N,)
    tokenizer_seconds = time.perf_counter() - start
    torch.manual_seed(SEED)
    config = LlamaConfig(**MODEL, bos_token_id=0, eos_token_id=0, pad_token_id=None)
    model = LlamaForCausalLM(config)
    run = train(_Logits(model), ids, RECIPE, seed=SEED, progress=progress)
    folder.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(folder, safe_serialization=True)
    (folder / "generation_config.json").unlink(missing_ok=True)  # the course samples with its own generate
    tokenizer.save(str(folder / "tokenizer.json"))
    write_tokenizer_config(folder)
    return {"tokens": len(ids), "characters": len(train_text), "tokenizer_seconds": round(tokenizer_seconds, 1),
            "train_seconds": round(run.seconds, 1), "first_loss": round(run.losses[0], 3),
            "last_loss": round(sum(run.losses[-20:]) / 20, 3)}


def write_tokenizer_config(folder):
    """tokenizer_config.json: the special token and the chat template (a scene of a play), as on the hub."""
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT,
              "chat_template": PLAY_TEMPLATE}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="rebuild in a temporary folder and compare")
    args = parser.parse_args(argv)
    if not args.check:
        print(json.dumps(build(HERE), indent=1))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        figures = build(Path(tmp))
        different = [name for name in FILES if not filecmp.cmp(Path(tmp) / name, HERE / name, shallow=False)]
    print(json.dumps(figures, indent=1))
    print("differs: " + ", ".join(different) if different else "the same bytes")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
