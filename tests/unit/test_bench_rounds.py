"""When the bench times another round: the spread of the ratios, not the answer's length."""

from localspec.bench.rounds import ROUNDS_MAX, SETTLED_ERROR, median_error, more_rounds


def test_the_asked_rounds_are_always_timed():
    assert more_rounds(3, 0, []) and more_rounds(3, 2, [[1.0, 1.0]])
    assert not more_rounds(3, 3, [[1.0, 1.01, 0.99]])
    assert more_rounds(1, 0, []) and not more_rounds(1, 1, [[0.5]])  # one round stays one


def test_disagreeing_ratios_get_more_rounds_up_to_the_cap():
    noisy = [0.89, 1.39, 0.96]  # a neighbour stalled one plain run by a third
    assert median_error(noisy) > SETTLED_ERROR and more_rounds(3, 3, [[1.0, 1.0, 1.0], noisy])
    assert more_rounds(3, 8, [noisy * 3])
    assert not more_rounds(3, ROUNDS_MAX * 3, [noisy * 3])


def test_a_spread_that_more_rounds_settle_stops():
    ratios = [0.95, 1.05, 1.0]  # sd 5%: 3.6% error at 3 rounds
    n = 3
    while more_rounds(3, n, [ratios]):
        ratios.append([0.97, 1.03][n % 2])
        n += 1
    assert 3 < n < ROUNDS_MAX * 3 and median_error(ratios) <= SETTLED_ERROR
