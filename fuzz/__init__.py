"""Coverage-guided fuzzing of every decoder that reads bytes from the network or disk (``fuzz/run.py``).

``fuzz.targets`` holds the properties each input must satisfy, as plain Python (no atheris needed): the
regression tests replay the seed corpus and every crash ever found through them.
"""
