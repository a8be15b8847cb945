"""The model answers of every exercise in the course: the single source of truth.

Every graded exercise of ../../shared/CURRICULUM.md is importable from here, e.g.
``from autograder.reference import MultiHeadAttention``.
"""

from .attention import SelfAttention, scaled_dot_product_attention
from .decoder import Decoder, DecoderLayer, causal_mask, padding_mask
from .encoder import Encoder, EncoderLayer, PositionwiseFeedForward
from .language_model import (
    DecoderOnlyLM,
    cached_self_attention,
    generate,
    make_lm_examples,
    next_token_probs,
    perplexity,
)
from .llama import LlamaBlock, LlamaLM, cached_gqa_attention, load_llama_weights
from .model import Transformer, count_parameters, greedy_decode, noam_lr
from .modern import GroupedQueryAttention, RMSNorm, SwiGLU, apply_rotary, flash_attention
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .positional import (
    LearnedPositionalEmbedding,
    PositionalEncoding,
    TokenEmbedding,
    relative_position_matrix,
    sinusoidal_positional_encoding,
)

__all__ = [
    "scaled_dot_product_attention", "SelfAttention",
    "split_heads", "merge_heads", "MultiHeadAttention",
    "sinusoidal_positional_encoding", "PositionalEncoding", "LearnedPositionalEmbedding",
    "TokenEmbedding", "relative_position_matrix",
    "PositionwiseFeedForward", "EncoderLayer", "Encoder",
    "causal_mask", "padding_mask", "DecoderLayer", "Decoder",
    "Transformer", "count_parameters", "noam_lr", "greedy_decode",
    "make_lm_examples", "DecoderOnlyLM", "cached_self_attention", "next_token_probs", "generate", "perplexity",
    "RMSNorm", "SwiGLU", "apply_rotary", "GroupedQueryAttention", "flash_attention",
    "LlamaBlock", "LlamaLM", "load_llama_weights", "cached_gqa_attention",
]
