"""When a drift check says "drift": at a known false-alarm rate over all of a run's columns.

Evidently judges each column on its own at p < 0.05 below 1,000 reference rows (its
p-value tests) and by a distance threshold above (normed Wasserstein, Jensen-Shannon). Two
things made the small-sample verdict cry wolf on data of one distribution:

- **Many columns, no correction.** With 20 columns each at 5%, some column "drifts" in
  most runs (1 - 0.95^20 = 64%). Here the p-value tests of a run are held together with
  Holm's method: the run's chance of naming any column when nothing changed is at most
  ALPHA, whatever the number of columns, and a column that drifted alone is still found.
- **A one-sample chi-square.** Evidently's chi-square compares the current counts against
  the reference's proportions as if those were exact; when the reference is itself a sample
  of a few hundred rows, its noise counts as drift (the statistic is about doubled at equal
  sizes). Categories (and numbers of at most 5 values, as Evidently treats them) are judged
  here by the two-sample chi-square test of the 2 x k table (scipy's chi2_contingency),
  registered as an Evidently test so Evidently still runs it.

Above 1,000 reference rows Evidently's verdict is a distance past a fixed threshold (0.1).
A distance is an effect size, not a p-value, so Holm cannot hold it, and on unchanged data
a noisy one (the Wasserstein distance of a heavy-tailed column, normed by its standard
deviation) crosses 0.1 often enough that one of 20 columns does in about 6% of runs at
2,000 rows. A p-value alone is no answer either: at 50,000 rows Kolmogorov-Smirnov finds a
shift of 0.04 sd, which no one would page for. So there a column drifts only where both
hold: its distance is past Evidently's threshold (the change is big enough to matter) and
the p-value of the test Evidently would have used at 1,000 rows (`p_value_test`), held with
every other column's by Holm, is rejected (the change is not the samples' noise). Requiring
the distance as well can only remove alarms, so a run of unchanged data names any column at
most ALPHA of the time at every size; a shift of 0.3 sd has a distance near 0.3 and a
p-value far below 0.05/20 from 1,000 rows on. docs/monitoring.md derives MIN_ROWS from the
power the tests have at the smallest samples, and bench/drift_alarm.py measures both rates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ALPHA = 0.05  # the chance a run of unchanged data names any column, at most
# The smallest sample judged: below it a 0.5 sd shift in one of 20 columns is missed more
# than one time in ten (docs/monitoring.md, "How many rows").
MIN_ROWS = 300
SMALL_SAMPLE = 1_000  # Evidently's switch from p-value tests to distances (reference rows)
TWO_SAMPLE_CHI_SQUARE = "chisquare_two_sample"
TWO_SAMPLE_CHI_SQUARE_NAME = "chi-square (two-sample) p_value"  # as results show it


def _two_sample_chi_square(reference: Any, current: Any, feature_type: Any, threshold: float) -> tuple[float, bool]:
    """p-value of the chi-square test that both samples come from one distribution over
    their categories (the 2 x k contingency table, no continuity correction)."""
    import numpy as np
    import pandas as pd
    from scipy.stats import chi2_contingency

    ref, cur = reference.dropna(), current.dropna()
    categories = pd.Index(pd.concat([ref, cur]).unique())
    table = np.array([ref.value_counts().reindex(categories, fill_value=0).to_numpy(),
                      cur.value_counts().reindex(categories, fill_value=0).to_numpy()])
    if len(categories) < 2 or (table.sum(axis=1) == 0).any():
        return 1.0, False  # one category, or an empty sample: nothing to compare
    p_value = float(chi2_contingency(table, correction=False).pvalue)
    return p_value, p_value < threshold


def register() -> None:
    """Make the two-sample chi-square an Evidently test (once)."""
    from evidently.legacy.calculations.stattests.registry import StatTest, _registered_stat_tests, register_stattest
    from evidently.legacy.core import ColumnType

    if TWO_SAMPLE_CHI_SQUARE not in _registered_stat_tests:
        register_stattest(StatTest(name=TWO_SAMPLE_CHI_SQUARE, display_name=TWO_SAMPLE_CHI_SQUARE_NAME,
                                   allowed_feature_types=[ColumnType.Categorical, ColumnType.Numerical]),
                          default_impl=_two_sample_chi_square)


def method_for(reference: Any, current: Any, categorical: bool) -> str | None:
    """The test for one column where Evidently's own pick would be its one-sample
    chi-square (below SMALL_SAMPLE reference rows, more than 2 values, and a category or a
    number of at most 5 values); None keeps Evidently's pick."""
    import pandas as pd

    if len(reference) > SMALL_SAMPLE:  # Evidently decides on the reference's size alone
        return None

    values = pd.concat([reference, current]).nunique()
    if values > 2 and (categorical or values <= 5):
        return TWO_SAMPLE_CHI_SQUARE
    return None


def p_value_test(reference: Any, current: Any, categorical: bool) -> Any:
    """The p-value test Evidently picks for this column at 1,000 reference rows or fewer,
    with the two-sample chi-square in place of its one-sample one (as `method_for`): a Z-test
    of two proportions for at most 2 values, the two-sample chi-square for a category or a
    number of at most 5 values, Kolmogorov-Smirnov for other numbers. Evidently's StatTest."""
    import pandas as pd
    from evidently.legacy.calculations.stattests import ks_stat_test, z_stat_test
    from evidently.legacy.calculations.stattests.registry import get_registered_stattest
    from evidently.legacy.core import ColumnType

    register()
    values = pd.concat([reference, current]).nunique()
    if categorical or values <= 5:
        if values <= 2:
            return z_stat_test
        return get_registered_stattest(TWO_SAMPLE_CHI_SQUARE, ColumnType.Categorical)
    return ks_stat_test


def p_value(reference: Any, current: Any, categorical: bool) -> tuple[str, float]:
    """(the test's name as results show it, its p-value) for a column that Evidently judged
    by a distance: run on the values Evidently's own tests get (infinities and nulls
    dropped)."""
    import numpy as np
    from evidently.legacy.core import ColumnType

    ref, cur = (s.replace([-np.inf, np.inf], np.nan).dropna() for s in (reference, current))
    test = p_value_test(ref, cur, categorical)
    kind = ColumnType.Categorical if categorical else ColumnType.Numerical
    return test.display_name, float(test(ref, cur, kind, ALPHA).drift_score)


def test_name(method: str) -> str:
    """A result's test as people read it: Evidently reports a test it was asked for by its
    registered name, and one it picked by its display name."""
    return TWO_SAMPLE_CHI_SQUARE_NAME if method == TWO_SAMPLE_CHI_SQUARE else method


def is_p_value(test: str) -> bool:
    """Evidently names its p-value tests "... p_value" ("K-S p_value", "Z-test p_value")."""
    return test.endswith("p_value")


def holm(p_values: Sequence[tuple[str, float]], alpha: float = ALPHA) -> dict[str, tuple[float, bool]]:
    """Holm's step-down method: the smallest p-value against alpha/m, the next against
    alpha/(m-1), ..., rejecting until the first that does not. For each name: the level its
    p-value was held to, and whether it was rejected."""
    ordered = sorted(p_values, key=lambda item: item[1])
    decided: dict[str, tuple[float, bool]] = {}
    rejecting = True
    for rank, (name, p_value) in enumerate(ordered):
        level = alpha / (len(ordered) - rank)
        rejecting = rejecting and p_value <= level
        decided[name] = (level, rejecting)
    return decided
