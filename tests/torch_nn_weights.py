"""torch.nn counterparts of the course's modules, and weight copying between the two.

The course names its parameters after torch.nn's (CURRICULUM.md), with three differences:

- torch.nn stacks the query, key and value projections of attention in one matrix,
  ``in_proj_weight`` (rows ``[W_q; W_k; W_v]``) and one ``in_proj_bias``; the course has
  ``q_proj``, ``k_proj``, ``v_proj``, each an ``nn.Linear``.
- torch.nn's layers own ``linear1`` and ``linear2``; the course's live in ``ff``.
- torch.nn's decoder layer calls its cross-attention ``multihead_attn``; the course ``cross_attn``.

Everything else (``out_proj``, ``norm1``..``norm3``, ``layers.<i>``, ``norm``, ``encoder``,
``decoder``) has the same name, and the renames compose, so one conversion,
:func:`to_course_names`, serves every level: an attention module, a layer, a stack, or a
whole ``nn.Transformer``. It converts a dict of gradients as well as a state dict.
"""

import torch
from torch import nn

_RENAMED = {"multihead_attn": "cross_attn", "linear1": "ff.linear1", "linear2": "ff.linear2"}
_IN_PROJ = {"in_proj_weight": "weight", "in_proj_bias": "bias"}
_TRANSFORMER_OWN = {  # parts of the course's Transformer that nn.Transformer does not have
    "src_embed.embedding.weight",
    "tgt_embed.embedding.weight",
    "pos_enc.pe",
    "generator.weight",
    "generator.bias",
}


def to_course_names(tensors):
    """A torch.nn ``{name: tensor}`` dict (a state dict, or gradients) under the course's names."""
    converted = {}
    for key, value in tensors.items():
        *path, name = key.split(".")
        path = [_RENAMED.get(part, part) for part in path]
        if name in _IN_PROJ:
            for proj, chunk in zip(("q_proj", "k_proj", "v_proj"), value.chunk(3, dim=0)):
                converted[".".join([*path, proj, _IN_PROJ[name]])] = chunk
        else:
            converted[".".join([*path, name])] = value
    return converted


def copy_from_torch(ours, theirs):
    """Load the weights of a torch.nn module into its course counterpart; every name must match.

    Works for SelfAttention / MultiHeadAttention <- nn.MultiheadAttention,
    EncoderLayer <- nn.TransformerEncoderLayer, Encoder <- nn.TransformerEncoder,
    DecoderLayer <- nn.TransformerDecoderLayer, Decoder <- nn.TransformerDecoder.
    """
    ours.load_state_dict(to_course_names(theirs.state_dict()), strict=True)


def copy_transformer_from_torch(ours, theirs):
    """Load an ``nn.Transformer``'s encoder and decoder into the course's ``Transformer``.

    The embeddings, positional encoding and generator are the course model's own and stay as
    they are; everything else must be covered exactly.
    """
    missing, unexpected = ours.load_state_dict(to_course_names(theirs.state_dict()), strict=False)
    if unexpected or set(missing) != _TRANSFORMER_OWN:
        raise KeyError(f"weights do not line up: missing {sorted(missing)}, unexpected {sorted(unexpected)}")


def randomize_(module, scale=0.5):
    """Fill every parameter with uniform noise in [-scale, scale], in place (uses the global RNG).

    torch.nn starts attention biases at 0 and LayerNorms at (1, 0); copying such values would
    let a swapped or forgotten bias or norm parameter go unnoticed.
    """
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(-scale, scale)
    return module


def torch_encoder_layer(d_model, num_heads, d_ff, norm_first=False, activation="relu"):
    return nn.TransformerEncoderLayer(
        d_model, num_heads, d_ff, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )


def torch_decoder_layer(d_model, num_heads, d_ff, norm_first=False, activation="relu"):
    return nn.TransformerDecoderLayer(
        d_model, num_heads, d_ff, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )


def torch_encoder(num_layers, d_model, num_heads, d_ff, norm_first=False, activation="relu"):
    """nn.TransformerEncoder matching the course's Encoder: a final LayerNorm only when pre-norm.

    ``enable_nested_tensor=False``: the nested-tensor fast path zeroes padded positions.
    """
    layer = torch_encoder_layer(d_model, num_heads, d_ff, norm_first, activation)
    norm = nn.LayerNorm(d_model) if norm_first else None
    return nn.TransformerEncoder(layer, num_layers, norm=norm, enable_nested_tensor=False)


def torch_decoder(num_layers, d_model, num_heads, d_ff, norm_first=False, activation="relu"):
    """nn.TransformerDecoder matching the course's Decoder: a final LayerNorm only when pre-norm."""
    layer = torch_decoder_layer(d_model, num_heads, d_ff, norm_first, activation)
    norm = nn.LayerNorm(d_model) if norm_first else None
    return nn.TransformerDecoder(layer, num_layers, norm=norm)


def torch_transformer(d_model, num_heads, num_layers, d_ff, norm_first=False, activation="relu"):
    """nn.Transformer matching the encoder and decoder of the course's Transformer.

    nn.Transformer ends both stacks with a LayerNorm; the paper's post-norm model has none, so
    for post-norm they become ``nn.Identity()`` (CURRICULUM.md, conventions). The encoder is
    passed in so that it is built with ``enable_nested_tensor=False``.
    """
    encoder = nn.TransformerEncoder(
        torch_encoder_layer(d_model, num_heads, d_ff, norm_first, activation),
        num_layers,
        norm=nn.LayerNorm(d_model) if norm_first else nn.Identity(),
        enable_nested_tensor=False,
    )
    decoder = nn.TransformerDecoder(
        torch_decoder_layer(d_model, num_heads, d_ff, norm_first, activation),
        num_layers,
        norm=nn.LayerNorm(d_model) if norm_first else nn.Identity(),
    )
    return nn.Transformer(
        d_model, num_heads, custom_encoder=encoder, custom_decoder=decoder, batch_first=True, norm_first=norm_first
    )
