"""The checkpoint lesson 09 ships (data/llama_shakespeare/): it loads into transformers and into the
course's LlamaLM, which give the same logits, and its tokenizer reads the course's text."""

import hashlib

import pytest
import torch
from transformers import LlamaForCausalLM

from autograder.reference import LlamaLM, generate, load_llama_weights
from lesson_tools import open_weights

# The sha256 of each committed file, as data/llama_shakespeare/README.md says them.
SHA256 = {
    "config.json": "49966cba3ed2f1dfb784195d736158f5cea34d24204d0467b094c5145a50de17",
    "model.safetensors": "3bf1b0272d476b2a2a7d5f76e14e24485ff79f69d605d13a2ca1ad3fa8f347cc",
    "tokenizer.json": "e4f1888054e27b540e3010b69bc0244fd1a44ceffedca731657b202295135d6d",
    "tokenizer_config.json": "2f9f48684df3ba774d7482074a98b234716c0053bee1c6a81e2ece860d2ac621",
}


@pytest.fixture(scope="module")
def prompt():
    text = "ROMEO.\nBut soft, what light through yonder window breaks?\n"
    return torch.tensor([open_weights.load_tokenizer().encode(text).ids])


def test_the_files_are_the_ones_the_readme_describes():
    for name, digest in SHA256.items():
        assert hashlib.sha256((open_weights.CHECKPOINT / name).read_bytes()).hexdigest() == digest, name
    readme = (open_weights.CHECKPOINT / "README.md").read_text()
    assert all(digest in readme for digest in SHA256.values())
    assert sum((open_weights.CHECKPOINT / name).stat().st_size for name in SHA256) < 10e6


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-4), (torch.float64, 1e-6)])
def test_transformers_and_the_course_give_the_same_logits(prompt, dtype, tolerance):
    theirs = LlamaForCausalLM.from_pretrained(open_weights.CHECKPOINT, dtype=dtype).eval()
    ours = LlamaLM.from_config(open_weights.read_config()).to(dtype).eval()
    load_llama_weights(ours, {k: v.to(dtype) for k, v in open_weights.read_weights().items()})
    assert ours.lm_head.weight is ours.embed.weight  # the config ties them; the file has no lm_head
    with torch.no_grad():
        expected, got = theirs(prompt).logits, ours(prompt)
    assert (got - expected).abs().max() < tolerance
    assert (got - expected).abs().max() < 1e-3 * expected.abs().max()  # the bound is small next to the logits


def test_it_writes_like_shakespeare(prompt):
    """Trained, not random: greedy continuations are English words, and it predicts the text well."""
    model = load_llama_weights(LlamaLM.from_config(open_weights.read_config()), open_weights.read_weights()).eval()
    tokenizer = open_weights.load_tokenizer()
    with torch.no_grad():
        logits = model(prompt)
        loss = torch.nn.functional.cross_entropy(logits[0, :-1], prompt[0, 1:]).item()
    assert loss < 5.0  # a random model: ln(1024) = 6.9
    text = tokenizer.decode(generate(model, prompt, 40, top_k=1)[0, prompt.size(1):].tolist())
    words = [w.strip(".,;:!?'") for w in text.split()]
    assert sum(w.lower() in {"the", "and", "i", "to", "of", "my", "you", "a", "that", "in", "is", "not", "be", "me",
                             "with", "it", "your", "this", "his", "he", "for", "have", "but", "thou", "so", "lord"}
               for w in words) >= 3, text


def test_its_chat_template_is_a_scene():
    text = open_weights.chat_text([{"role": "user", "content": "Who art thou?"}])
    assert text == "JULIET.\nWho art thou?\n\nROMEO.\n"
