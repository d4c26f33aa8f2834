"""Paired ratios of the race's rounds: in every round both configurations ran, one after
the other in a random order, so each round gives one ratio, and the rounds give its
spread."""
import math
import statistics

# Student's t, two-sided 95%, by degrees of freedom.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
        20: 2.086, 25: 2.060, 30: 2.042}


def t95(df):
    if df in _T95:
        return _T95[df]
    smaller = [d for d in _T95 if d < df]
    return _T95[max(smaller)] if df <= 30 else 1.96


def paired(ours, theirs):
    """{median, mean, low, high, rounds} of ours[r] / theirs[r] over the rounds where both
    ran (None where they failed): the median ratio, and the geometric mean with its 95%
    interval (Student's t on the logarithms). None when fewer than 2 rounds pair up."""
    ratios = [a / b for a, b in zip(ours, theirs) if a and b]
    if len(ratios) < 2:
        return None
    logs = [math.log(r) for r in ratios]
    mean = statistics.mean(logs)
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return {"median": statistics.median(ratios), "mean": math.exp(mean), "low": math.exp(mean - half),
            "high": math.exp(mean + half), "rounds": len(ratios)}


def describe(r):
    if r is None:
        return "—"
    return f"{r['median']:.2f}x (mean {r['mean']:.2f}, 95% {r['low']:.2f}–{r['high']:.2f}, n={r['rounds']})"
