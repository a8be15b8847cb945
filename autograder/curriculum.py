"""The one place that says what each lesson asks for: exercises, points and forbidden APIs.

The notebooks (a test keeps their cells in step), the grader and the release all read this.
Names and signatures are fixed by ../shared/CURRICULUM.md.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Exercise:
    name: str  # the answer cell's grade_id and the name the student defines
    points: int
    kind: str  # "function" or "module"
    # Library calls that would do the exercise for the student: using one fails the exercise.
    forbidden: tuple = ()
    # Exercises of the same lesson that this one calls (or builds): when it is graded, the
    # reference's versions of them stand in for the student's, so one mistake costs one exercise.
    calls: tuple = ()


@dataclass(frozen=True)
class Lesson:
    name: str  # the nbgrader assignment and the notebook's stem, e.g. "01_self_attention"
    title: str
    reference_module: str  # the module of autograder/reference/ that answers this lesson
    exercises: tuple = field(default_factory=tuple)
    data_files: tuple = ()  # files of the repository the lesson reads (its release bundle carries them)

    @property
    def number(self):
        return int(self.name[:2])

    def exercise(self, name):
        for exercise in self.exercises:
            if exercise.name == name:
                return exercise
        raise KeyError(name)

    @property
    def max_score(self):
        return sum(exercise.points for exercise in self.exercises)


# The private kernels are named too: torch._native_multi_head_attention gives a whole
# multi-head attention with its weights, torch._transformer_encoder_layer_fwd a whole layer.
_ATTENTION_BUILTINS = ("scaled_dot_product_attention", "MultiheadAttention", "multi_head_attention_forward",
                       "_native_multi_head_attention")
_TRANSFORMER_BUILTINS = _ATTENTION_BUILTINS + (
    "TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder", "Transformer",
    "_transformer_encoder_layer_fwd",
)

# Lesson 09 loads a transformers checkpoint: its modelling code would be the answer itself.
_TRANSFORMERS_MODELLING = ("transformers", "LlamaForCausalLM", "LlamaModel", "LlamaDecoderLayer", "LlamaAttention",
                           "LlamaRMSNorm", "LlamaRotaryEmbedding", "apply_rotary_pos_emb", "AutoModel",
                           "AutoModelForCausalLM")
_LLAMA_BUILTINS = _ATTENTION_BUILTINS + _TRANSFORMERS_MODELLING + ("RMSNorm", "rms_norm")

LESSONS = {
    lesson.name: lesson
    for lesson in (
        Lesson("01_self_attention", "Self-attention", "attention", (
            Exercise("scaled_dot_product_attention", 6, "function", _ATTENTION_BUILTINS),
            Exercise("SelfAttention", 4, "module", _ATTENTION_BUILTINS, calls=("scaled_dot_product_attention",)),
        )),
        Lesson("02_multi_head_attention", "Multi-head attention", "multihead", (
            Exercise("split_heads", 2, "function"),
            Exercise("merge_heads", 2, "function"),
            Exercise("MultiHeadAttention", 6, "module", _ATTENTION_BUILTINS, calls=("split_heads", "merge_heads")),
        )),
        Lesson("03_positional_encoding", "Positional encoding", "positional", (
            Exercise("sinusoidal_positional_encoding", 3, "function"),
            Exercise("PositionalEncoding", 2, "module", calls=("sinusoidal_positional_encoding",)),
            Exercise("LearnedPositionalEmbedding", 2, "module"),
            Exercise("TokenEmbedding", 1, "module"),
            Exercise("relative_position_matrix", 2, "function"),
        )),
        Lesson("04_encoder", "The encoder", "encoder", (
            Exercise("PositionwiseFeedForward", 2, "module"),
            Exercise("EncoderLayer", 5, "module", _TRANSFORMER_BUILTINS, calls=("PositionwiseFeedForward",)),
            Exercise("Encoder", 3, "module", _TRANSFORMER_BUILTINS, calls=("EncoderLayer",)),
        )),
        Lesson("05_decoder_masking", "The decoder and masking", "decoder", (
            Exercise("causal_mask", 2, "function", ("generate_square_subsequent_mask",)),
            Exercise("padding_mask", 1, "function"),
            Exercise("DecoderLayer", 5, "module", _TRANSFORMER_BUILTINS),
            Exercise("Decoder", 2, "module", _TRANSFORMER_BUILTINS, calls=("DecoderLayer",)),
        )),
        Lesson("06_full_model", "The full model, trained", "model", (
            Exercise("Transformer", 5, "module", _TRANSFORMER_BUILTINS),
            Exercise("count_parameters", 1, "function"),
            Exercise("noam_lr", 1, "function"),
            Exercise("greedy_decode", 3, "function"),
        )),
        Lesson("07_language_model", "A language model on real text", "language_model", (
            Exercise("make_lm_examples", 1, "function"),
            Exercise("DecoderOnlyLM", 2, "module", _TRANSFORMER_BUILTINS),
            Exercise("cached_self_attention", 2, "function", _TRANSFORMER_BUILTINS),
            Exercise("next_token_probs", 2, "function"),
            Exercise("generate", 2, "function", calls=("next_token_probs",)),
            Exercise("perplexity", 1, "function", calls=("make_lm_examples",)),
        ), data_files=("data/shakespeare/shakespeare.txt",)),
        Lesson("08_modern_transformer", "The modern Transformer", "modern", (
            Exercise("RMSNorm", 1, "module", ("RMSNorm", "rms_norm")),
            Exercise("SwiGLU", 1, "module"),
            Exercise("apply_rotary", 2, "function"),
            Exercise("GroupedQueryAttention", 3, "module", _ATTENTION_BUILTINS, calls=("apply_rotary",)),
            Exercise("flash_attention", 3, "function", _ATTENTION_BUILTINS),
        ), data_files=("data/shakespeare/shakespeare.txt",)),
        Lesson("09_open_weights", "Open weights", "llama", (
            Exercise("LlamaBlock", 2, "module", _LLAMA_BUILTINS),
            Exercise("LlamaLM", 2, "module", _LLAMA_BUILTINS, calls=("LlamaBlock",)),
            Exercise("load_llama_weights", 3, "function", _LLAMA_BUILTINS),
            Exercise("cached_gqa_attention", 3, "function", _LLAMA_BUILTINS),
        ), data_files=("data/llama_shakespeare/config.json", "data/llama_shakespeare/model.safetensors",
                       "data/llama_shakespeare/tokenizer.json", "data/llama_shakespeare/tokenizer_config.json")),
    )
}

EXERCISES = {exercise.name: lesson for lesson in LESSONS.values() for exercise in lesson.exercises}

# The orientation notebook students open before lesson 01 (solutions/00_start_here/). It has no
# exercises and no grade, so it is no Lesson and stays out of LESSONS, which grading, autograding,
# the checks and the tests iterate; `make lessons` generates it and `make release` hands it out
# like a lesson (autograder/lessons.py, autograder/release.py).
INTRODUCTION = "00_start_here"


def lessons_before(lesson):
    """The lessons a student has done before ``lesson``, whose reference they may use."""
    return [other for other in LESSONS.values() if other.number < lesson.number]


def lesson_of(exercise_name):
    """The Lesson that asks for this exercise."""
    return EXERCISES[exercise_name]


def callees(exercise_name):
    """Every exercise of the same lesson that ``exercise_name`` calls, directly or through another, in
    lesson order: what stands in for the student's when it is graded."""
    lesson = lesson_of(exercise_name)
    found, todo = set(), list(lesson.exercise(exercise_name).calls)
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += lesson.exercise(name).calls
    return [e.name for e in lesson.exercises if e.name in found]
