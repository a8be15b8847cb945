"""What the lessons give students around the model: data, tokenizers, training loops, checkpoints.

``reversal`` (lesson 06's task), ``language_data`` (lesson 07's text, tokenizer and training
loop), ``open_weights`` (lesson 09's checkpoint, tokenizer and chat template), ``saved_runs``
(lesson 08's long training cell, kept between runs of the notebook) and ``threads``.
None of them imports the reference at import time, and a class receives all of them: the only
reference they use (``reversal``'s defaults) is looked up when called, where a student may hold it.
"""
