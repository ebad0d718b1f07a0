# SPDX-License-Identifier: Apache-2.0
"""A byte fuzz the GPU scripts' tests share: bytes of valid input files replaced by JSON
punctuation and digits, so that a reader meets broken numbers, brackets and strings."""
import io
import random
from contextlib import redirect_stderr

JSON_BYTES = b'0123456789.-,[]{}":e '


def fuzz_files(paths, read, rounds: int, seed: int, refusals=(ValueError, OSError, KeyError)) -> int:
    """Mutates 1-4 bytes of one of PATHS per round, calls READ() (its stderr swallowed) and
    restores the file. An exception other than REFUSALS fails the calling test; returns how many
    rounds were refused, so a test can check the fuzz reached the checks at all."""
    originals = {}
    for p in paths:
        with open(p, "rb") as f:
            originals[p] = f.read()
    rng = random.Random(seed)
    refused = 0
    for _ in range(rounds):
        target = rng.choice(list(originals))
        b = bytearray(originals[target])
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.choice(JSON_BYTES)
        with open(target, "wb") as f:
            f.write(bytes(b))
        try:
            with redirect_stderr(io.StringIO()):
                read()
        except refusals:
            refused += 1
        finally:
            with open(target, "wb") as f:
                f.write(originals[target])
    return refused
