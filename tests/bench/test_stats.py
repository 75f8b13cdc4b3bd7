import pytest

from bench.stats import dist, gaps, gaps_in_window, percentile, rate, ratio


def test_percentile_interpolates_like_numpy_linear():
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 95) == pytest.approx(3.85)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0


def test_percentile_ignores_input_order():
    assert percentile([9.0, 1.0, 5.0], 50) == 5.0


def test_percentile_rejects_empty_and_out_of_range():
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="pct=101"):
        percentile([1.0], 101)


def test_dist_summary_and_scaling():
    d = dist([0.1, 0.2, 0.3, 0.4, 1.0])
    assert d is not None
    assert (d.n, d.min, d.max) == (5, 0.1, 1.0)
    assert d.mean == pytest.approx(0.4)
    assert d.p50 == pytest.approx(0.3)
    assert d.scaled(1000).p50 == pytest.approx(300.0)
    assert dist([]) is None


def test_gaps_between_arrivals():
    assert gaps([0.0, 0.1, 0.35]) == pytest.approx([0.1, 0.25])
    assert gaps([1.0]) == []


def test_gaps_in_window_counts_a_stall_spanning_the_window():
    times = [0.0, 1.0, 2.0, 5.0, 5.5]
    # window 2.5..4.0 lies inside the 2.0→5.0 stall: that gap counts, nothing else
    assert gaps_in_window(times, 2.5, 4.0) == [3.0]
    assert gaps_in_window(times, 0.5, 2.0) == [1.0, 1.0]


def test_rate_and_ratio_of_empty_intervals():
    assert rate(10, 2.0) == 5.0
    assert rate(10, 0.0) is None
    assert ratio(1, 4) == 0.25
    assert ratio(1, 0) is None
