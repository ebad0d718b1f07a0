# SPDX-License-Identifier: Apache-2.0
"""Rank statistics the GPU result scripts share: Spearman's rank correlation with a permutation
p-value that a fixed seed makes reproducible (the same files give the same p). signal_check.py
ranks a controller's signal against the production job's loss run by run; pool_memory.py
--by-host-speed ranks the calls of a cell by how fast the production job ran alone."""
import random
import statistics

PERMUTATIONS = 10_000


def ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def pearson(a: list[float], b: list[float]):
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    sa = sum((x - ma) ** 2 for x in a) ** 0.5
    sb = sum((y - mb) ** 2 for y in b) ** 0.5
    if sa == 0 or sb == 0:
        return None  # one side constant: no rank order to compare
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / (sa * sb)


def spearman(a: list[float], b: list[float]):
    """Spearman's rho (Pearson's on the ranks) and its two-sided permutation p; None for either
    where fewer than 3 pairs or a constant side leave no order to compare."""
    if len(a) < 3:
        return None, None
    ra, rb = ranks(a), ranks(b)
    rho = pearson(ra, rb)
    if rho is None:
        return None, None
    rng = random.Random(1)
    shuffled, hits = list(rb), 0
    for _ in range(PERMUTATIONS):
        rng.shuffle(shuffled)
        r = pearson(ra, shuffled)
        hits += r is not None and abs(r) >= abs(rho) - 1e-12
    return rho, (hits + 1) / (PERMUTATIONS + 1)
