"""The sequence-reversal task of lesson 06 (lesson_tools/reversal.py): batches, accuracy, schedule, training.

Fast tests only; the full training run is measured by bench/reversal.py, not here.
"""

import dataclasses
import itertools

import pytest
import torch
from torch import nn

from lesson_tools import reversal
from autograder.reference import noam_lr
from lesson_tools.reversal import BOS, EOS, PAD, ReversalConfig

TINY = ReversalConfig(num_symbols=4, min_len=3, max_len=5, d_model=16, num_heads=2, num_layers=1, d_ff=32,
                      batch_size=32, steps=40, warmup=10, peak_lr=1e-2, num_test=50)


# ----------------------------------------------------------------------------- batches
def test_make_batch_lays_out_source_and_target():
    strings = torch.tensor([[3, 4, 5, 0], [6, 7, 8, 9], [5, 9, 9, 9]])  # row 2: junk after its length
    src, tgt = reversal.make_batch(strings, torch.tensor([3, 4, 1]))
    assert src.tolist() == [[3, 4, 5, PAD], [6, 7, 8, 9], [5, PAD, PAD, PAD]]
    assert tgt.tolist() == [[BOS, 5, 4, 3, EOS, PAD],
                            [BOS, 9, 8, 7, 6, EOS],
                            [BOS, 5, EOS, PAD, PAD, PAD]]
    assert src.dtype == tgt.dtype == torch.long


def test_random_strings_respect_lengths_and_vocabulary():
    strings, lengths = reversal.random_strings(500, TINY, torch.Generator().manual_seed(0))
    assert strings.shape == (500, TINY.max_len) and lengths.shape == (500,)
    assert set(lengths.tolist()) == set(range(TINY.min_len, TINY.max_len + 1))
    inside = torch.arange(TINY.max_len)[None, :] < lengths[:, None]
    assert (strings[~inside] == PAD).all()
    assert ((strings[inside] >= reversal.FIRST_SYMBOL) & (strings[inside] < TINY.vocab_size)).all()


def test_sample_batch_shapes_and_token_layout():
    src, tgt = reversal.sample_batch(TINY, torch.Generator().manual_seed(1))
    B, S = TINY.batch_size, TINY.max_len
    assert src.shape == (B, S) and tgt.shape == (B, S + 2)
    for source, target in zip(src.tolist(), tgt.tolist()):
        string = [t for t in source if t != PAD]
        n = len(string)
        assert TINY.min_len <= n <= TINY.max_len and source[:n] == string  # padding only at the end
        assert target == [BOS] + string[::-1] + [EOS] + [PAD] * (S - n)


def test_sample_batch_is_seeded():
    first = reversal.sample_batch(TINY, torch.Generator().manual_seed(7))
    again = reversal.sample_batch(TINY, torch.Generator().manual_seed(7))
    other = reversal.sample_batch(TINY, torch.Generator().manual_seed(8))
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], other[0])


def test_string_keys_tell_strings_apart():
    config = ReversalConfig(num_symbols=3, min_len=1, max_len=3)
    strings = []
    for n in (1, 2, 3):
        for symbols in itertools.product(range(3, 6), repeat=n):
            strings.append(list(symbols) + [PAD] * (3 - n))
    keys = reversal.string_keys(torch.tensor(strings), config)
    assert len(set(keys.tolist())) == len(strings) == 3 + 9 + 27


def test_training_batches_never_hold_a_test_string():
    # Two symbols, length 3: eight strings in all. Exclude seven; every batch row must be the eighth.
    config = dataclasses.replace(TINY, num_symbols=2, min_len=3, max_len=3, batch_size=16)
    everything = torch.tensor(list(itertools.product((3, 4), repeat=3)))  # (8, 3)
    exclude = reversal.string_keys(everything[1:], config)
    src, _ = reversal.sample_batch(config, torch.Generator().manual_seed(0), exclude)
    assert (src == everything[0]).all()


def test_held_out_set_is_fixed_by_its_own_seed():
    a_src, a_tgt = reversal.held_out_set(TINY)
    b_src, b_tgt = reversal.held_out_set(TINY)
    assert torch.equal(a_src, b_src) and torch.equal(a_tgt, b_tgt) and a_src.shape == (TINY.num_test, TINY.max_len)
    c_src, _ = reversal.held_out_set(dataclasses.replace(TINY, test_seed=TINY.test_seed + 1))
    assert not torch.equal(a_src, c_src)


# ----------------------------------------------------------------------------- accuracy
TARGETS = torch.tensor([[BOS, 5, 4, 3, EOS, PAD],
                        [BOS, 9, 8, 7, 6, EOS]])


@pytest.mark.parametrize("prediction, expected", [
    ([[BOS, 5, 4, 3, EOS, PAD], [BOS, 9, 8, 7, 6, EOS]], [True, True]),     # exactly the targets
    ([[BOS, 5, 4, 3, EOS, PAD, PAD], [BOS, 9, 8, 7, 6, EOS, PAD]], [True, True]),  # wider, padded
    ([[BOS, 5, 4, 3, EOS], [BOS, 9, 8, 7, 6]], [True, False]),              # stopped early; row 1 lacks EOS
    ([[BOS, 5, 4, 4, EOS, PAD], [BOS, 9, 8, 7, 6, EOS]], [False, True]),    # one wrong token
    ([[BOS, 5, 4, 3, 3, EOS], [BOS, 9, 8, 7, EOS, PAD]], [False, False]),   # too long; too short
    ([[BOS, 5, 4, 3, EOS, 7], [BOS, 9, 8, 7, 6, 6]], [False, False]),       # tokens after EOS; no EOS
])
def test_exact_match_on_hand_made_cases(prediction, expected):
    assert reversal.exact_match(torch.tensor(prediction), TARGETS).tolist() == expected


def test_accuracy_counts_exact_rows_across_batches():
    src = torch.tensor([[3, 4, 5, PAD], [6, 7, 8, 9], [3, 3, PAD, PAD]])
    _, tgt = reversal.make_batch(src, torch.tensor([3, 4, 2]))
    model = nn.Linear(1, 1)  # only its device is read

    def perfect(model, s, max_len, bos_id, eos_id, src_key_padding_mask=None):
        assert bos_id == BOS and eos_id == EOS and torch.equal(src_key_padding_mask, s == PAD)
        return reversal.make_batch(s, (s != PAD).sum(dim=1))[1][:, :max_len]

    def first_row_wrong(model, s, max_len, bos_id, eos_id, src_key_padding_mask=None):
        out = perfect(model, s, max_len, bos_id, eos_id, src_key_padding_mask).clone()
        if torch.equal(s[0], src[0]):
            out[0, 1] = 9
        return out

    assert reversal.accuracy(model, src, tgt, decode=perfect, batch_size=2) == 1.0
    assert reversal.accuracy(model, src, tgt, decode=first_row_wrong, batch_size=2) == pytest.approx(2 / 3)


# ----------------------------------------------------------------------------- schedule, threads, config
def test_linear_schedule_warms_up_then_decays_towards_zero():
    config = dataclasses.replace(TINY, steps=20, warmup=5, peak_lr=1.0)
    rates = [reversal.learning_rate(step, config) for step in range(1, 21)]
    assert rates[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert all(a > b > 0 for a, b in zip(rates[4:], rates[5:]))
    assert rates[-1] == pytest.approx(1 / 16)


def test_noam_schedule_is_the_papers():
    config = dataclasses.replace(TINY, schedule="noam", lr_factor=0.5, d_model=16, warmup=10)
    for step in (1, 5, 10, 11, 400):
        assert reversal.learning_rate(step, config) == pytest.approx(0.5 * noam_lr(step, 16, 10))


def test_config_rejects_nonsense():
    with pytest.raises(ValueError, match="schedule"):
        ReversalConfig(schedule="cosine")
    with pytest.raises(ValueError, match="min_len"):
        ReversalConfig(min_len=5, max_len=4)


def test_cpu_threads_restores_the_setting():
    before = torch.get_num_threads()
    with reversal.cpu_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


# ----------------------------------------------------------------------------- model and training
def test_build_model_shares_one_matrix_and_is_seeded():
    model = reversal.build_model(TINY, seed=3)
    assert model.generator.weight is model.src_embed.embedding.weight is model.tgt_embed.embedding.weight
    assert model.generator.out_features == TINY.vocab_size
    again = reversal.build_model(TINY, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


def test_loss_ignores_padding():
    # Extra padding columns on both sides change neither the masked attention nor the counted targets.
    model = reversal.build_model(dataclasses.replace(TINY, max_len=TINY.max_len + 3)).eval()  # room for padding
    src, tgt = reversal.sample_batch(TINY, torch.Generator().manual_seed(2))
    padded_src = torch.cat([src, torch.full((src.size(0), 2), PAD)], dim=1)
    padded_tgt = torch.cat([tgt, torch.full((tgt.size(0), 3), PAD)], dim=1)
    with torch.no_grad():
        loss = reversal.loss_on(model, src, tgt, label_smoothing=0.1)
        padded = reversal.loss_on(model, padded_src, padded_tgt, label_smoothing=0.1)
    assert torch.isfinite(loss) and padded.item() == pytest.approx(loss.item(), abs=1e-5)


def test_a_few_training_steps_reduce_the_loss():
    model = reversal.build_model(TINY, seed=0)
    run = reversal.train(model, TINY, seed=0, progress=False)
    assert len(run.losses) == TINY.steps
    first, last = sum(run.losses[:5]) / 5, sum(run.losses[-5:]) / 5
    assert last < first - 0.3, f"the loss went from {first:.3f} to {last:.3f}"
    assert not model.training and 0.0 <= run.accuracy <= 1.0
    assert run.seconds > 0 and run.cpu_seconds > 0
