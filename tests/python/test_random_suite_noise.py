"""The randomized suite's noise ceiling (bench/random_suite.py, `noise_ceiling`): what a planner
that ran the oracle's own plan would score on the suite's paired comparison, from the
run-to-run noise of a fixed plan."""
import importlib.util
import math
import pathlib
import random

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_suite():
    spec = importlib.util.spec_from_file_location("random_suite", ROOT / "bench" / "random_suite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_a_noise_figure_there_is_no_ceiling():
    suite = load_suite()
    assert suite.noise_ceiling(None, 24, 2) is None
    assert suite.noise_ceiling(0.0, 24, 2) is None
    assert suite.noise_ceiling(0.05, 0, 2) is None


def test_quiet_runs_leave_nothing_under_the_line_and_noisy_ones_leave_several():
    suite = load_suite()
    p, expected, passes = suite.noise_ceiling(0.005, 24, 2)
    assert p < 1e-6 and expected < 1e-4 and passes > 0.999
    # A 5.5% spread of one run (the suite's on 2026-12-07): a ratio of two means of two runs
    # spreads by 5.5%, so P(under 0.95) = Phi(ln 0.95 / 0.055) = 17.4%.
    p, expected, passes = suite.noise_ceiling(0.055, 24, 2)
    assert math.isclose(p, 0.174, abs_tol=0.002)
    assert math.isclose(expected, 24 * p)
    # At most 2 of 24 under the line: the binomial's first three terms.
    assert math.isclose(passes, sum(math.comb(24, k) * p ** k * (1 - p) ** (24 - k)
                                    for k in range(3)))
    assert passes < 0.25
    # More rounds narrow the spread: the same noise over 8 rounds passes far more often.
    assert suite.noise_ceiling(0.055, 24, 8)[2] > 0.8


def test_the_ceiling_matches_a_simulation_of_the_paired_comparison():
    suite = load_suite()
    cv, scenarios, rounds, trials = 0.05, 24, 2, 4000
    rng = random.Random(7)
    under = 0
    for _ in range(trials):
        ratios = [rng.lognormvariate(0, cv) / rng.lognormvariate(0, cv) for _ in range(rounds)]
        under += sum(ratios) / rounds < 0.95
    p, _, _ = suite.noise_ceiling(cv, scenarios, rounds)
    assert abs(under / trials - p) < 0.02


def test_more_rounds_take_the_median_of_their_ratios_as_the_table_does():
    suite = load_suite()
    assert suite.median_spread(2) == 1.0
    # The median of many normal draws spreads sqrt(pi / 2) times as widely as their mean.
    assert 1.1 < suite.median_spread(6) < 1.25
    assert abs(suite.median_spread(41) - math.sqrt(math.pi / 2)) < 0.05
    cv, rounds, trials = 0.05, 6, 4000
    rng = random.Random(11)
    under = 0
    for _ in range(trials):
        ratios = sorted(rng.lognormvariate(0, cv) / rng.lognormvariate(0, cv)
                        for _ in range(rounds))
        under += (ratios[2] + ratios[3]) / 2 < 0.95
    p, _, _ = suite.noise_ceiling(cv, 24, rounds)
    assert abs(under / trials - p) < 0.015


def test_the_per_scenario_verdict_uses_the_same_spread_as_the_ceiling():
    suite = load_suite()
    cv = 0.05
    for rounds in (2, 6):
        edge = suite.ORACLE_LINE - suite.NOISE_Z * suite.paired_median_spread(cv, rounds)
        assert suite.below_beyond_noise(edge - 0.005, cv, rounds, suite.ORACLE_LINE)
        assert not suite.below_beyond_noise(edge + 0.005, cv, rounds, suite.ORACLE_LINE)
    # Two rounds: the median is the mean, sqrt(2 / 2) x cv.
    assert math.isclose(suite.paired_median_spread(cv, 2), cv)
