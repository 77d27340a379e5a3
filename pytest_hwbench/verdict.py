"""The one verdict contract every comparison shares (`judge_interval`: a change and its interval
against a threshold), and the statistics it rests on: the paired interval of `hwbench ab`'s
per-round ratios, the robust spread of rounds, Mann-Whitney U on rounds.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

Verdict = Literal["regression", "improvement", "unchanged", "inconclusive", "missing"]
VERDICTS: tuple[str, ...] = get_args(Verdict)

#: Fewer rounds than this on a side: no test is possible (5 vs 5 rounds can reach p = 0.008).
MIN_ROUNDS = 3
#: A change's interval is its point estimate +- this many combined uncertainties (1-sigma, log scale):
#: the spreads are robust estimates from a handful of rounds, sessions or cases, so a wide factor.
INTERVAL_Z = 3.0


def judge_interval(change: float, low: float, high: float, threshold: float) -> tuple[Verdict, str]:
    """The verdict every comparison shares, on a relative change and its interval [`low`, `high`]:

    - ``regression`` / ``improvement``: the interval excludes no change and `change` passes `threshold`;
    - ``unchanged``: the whole interval lies inside +-`threshold` (an equivalence test);
    - ``inconclusive`` otherwise, with the reason (the second item; "" for a firm verdict).
    """
    span = f"interval {low * 100:+.1f}% to {high * 100:+.1f}%"
    if (low > 0 or high < 0) and abs(change) > threshold:
        return ("regression" if change > 0 else "improvement"), ""
    if -threshold <= low and high <= threshold:
        return "unchanged", ""
    if low > 0 or high < 0:
        return "inconclusive", (f"{span}: a real change, but whether it passes +-{threshold:.0%} cannot be "
                                "told")
    return "inconclusive", f"{span} reaches past +-{threshold:.0%}: no change and a change both fit"


def paired_interval(ratios: Sequence[float], alpha: float) -> tuple[float, float, float, float] | None:
    """(change, low, high, p-value) of per-round ratios B / A: the geometric mean change and its
    1 - `alpha` Student-t interval from the log ratios, with the one-sample t-test's p-value; None
    for fewer than 3 usable ratios."""
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    if len(logs) < 3:
        return None
    from scipy.stats import ttest_1samp

    mean = statistics.fmean(logs)
    if min(logs) == max(logs):  # no spread: scipy's t would divide by zero
        return math.expm1(mean), math.expm1(mean), math.expm1(mean), 0.0 if mean else 1.0
    test = ttest_1samp(logs, 0.0)
    low, high = test.confidence_interval(1 - alpha)
    return math.expm1(mean), math.expm1(low), math.expm1(high), float(test.pvalue)


#: The change that counts and the paired test's significance unless asked otherwise (`hwbench ab`).
DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class PairVerdict:
    """`paired_verdict`'s answer on one case: the change and its interval [`low`, `high`], the
    p-value, the verdict and why where it is inconclusive."""

    case_id: str
    change: float | None
    p_value: float | None
    verdict: str
    note: str = ""
    low: float | None = None
    high: float | None = None


def paired_verdict(case_id: str, ratios: Sequence[float], *, threshold: float = DEFAULT_THRESHOLD,
                   alpha: float = DEFAULT_ALPHA) -> PairVerdict:
    """The verdict on one case's per-round ratios B / A: their geometric mean change and its
    1 - `alpha` Student-t interval (`paired_interval`), judged by `judge_interval`; inconclusive
    with fewer than 3 usable ratios."""
    result = paired_interval(ratios, alpha)
    if result is None:
        usable = sum(1 for r in ratios if r > 0 and math.isfinite(r))
        return PairVerdict(case_id, None, None, "inconclusive", f"{usable} paired rounds; need 3")
    change, low, high, p = result
    verdict, why = judge_interval(change, low, high, threshold)
    return PairVerdict(case_id, change, p, verdict, f"{why}; more rounds would tell" if why else "", low, high)


def relative_spread(values: Sequence[float]) -> float:
    """1.4826 x MAD / median: a robust relative standard deviation (0 for fewer than 2 values)."""
    if len(values) < 2:
        return 0.0
    import numpy as np  # not at import: `hwbench` loads this module for every command

    arr = np.asarray(values, dtype=float)
    median = float(np.median(arr))
    return 1.4826 * float(np.median(np.abs(arr - median))) / median if median > 0 else 0.0


def median_of(values: Sequence[Any]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return float(statistics.median(numbers)) if numbers else None


def mannwhitney(a: Sequence[float], b: Sequence[float]) -> float | None:
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy.stats import mannwhitneyu

    if len(set(a) | set(b)) == 1:
        return 1.0  # identical constant samples: no difference, and scipy would divide by zero
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = mannwhitneyu(a, b, alternative="two-sided")
    p = float(result.pvalue)
    return None if math.isnan(p) else p


def check_verdict_settings(threshold: float, alpha: float, *, prefix: str = "") -> None:
    """Raise ValueError unless `threshold` is a finite number >= 0 and `alpha` lies in (0, 1);
    `prefix` comes before the names (``"--"`` for the command-line flags)."""
    if not (threshold >= 0 and math.isfinite(threshold)):
        raise ValueError(f"{prefix}threshold must be a finite number >= 0 (0.10 = 10 %), got {threshold!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"{prefix}alpha must be in (0, 1), e.g. 0.05, got {alpha!r}")


__all__ = ["DEFAULT_ALPHA", "DEFAULT_THRESHOLD", "INTERVAL_Z", "MIN_ROUNDS", "VERDICTS", "PairVerdict", "Verdict",
           "check_verdict_settings", "judge_interval", "mannwhitney", "median_of", "paired_interval",
           "paired_verdict", "relative_spread"]
