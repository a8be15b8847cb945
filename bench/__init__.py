"""The course's benchmarks: scripts that measure and print figures, and never assert on time.

    python -m bench.all [--quick] [--only nn notebooks grade reversal]   every figure, one table (`make bench`)
    python -m bench.nn_speed                 reference vs torch.nn, forward + backward
    python -m bench.notebooks                nbval and `autograder grade` per notebook
    python bench/reversal.py                 lesson 06's training, several seeds
    python -m bench.open_weights             lesson 09's Llama against transformers: logits, tokens/s
    python bench/grading.py --students 50    nbgrader autograde vs the trusted grader (hours)
"""
