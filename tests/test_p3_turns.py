"""The turns bench of Part 7 (issue 50): the order of turns and the A/A control."""
import pytest

from lab.bench.p3 import aa_control, order


@pytest.mark.parametrize("n", [2, 3, 5])
def test_rotate_puts_every_config_in_every_place_and_no_turn_follows_itself(n):
    rounds = [order(r, n) for r in range(2 * n)]
    seq = [i for r in rounds for i in r]
    assert all(a != b for a, b in zip(seq, seq[1:]))   # every turn pays one switch
    if n > 2:   # each config first, second, ... equally often
        for pos in range(n):
            counts = [sum(r[pos] == c for r in rounds) for c in range(n)]
            assert len(set(counts)) == 1


def test_reverse_is_the_older_order_whose_round_ends_with_the_next_ones_start():
    seq = [i for r in range(4) for i in order(r, 3, "reverse")]
    assert any(a == b for a, b in zip(seq, seq[1:]))
    with pytest.raises(ValueError, match="how must be"):
        order(0, 3, "shuffle")


def test_aa_control_reports_its_interval_and_what_made_it():
    row = aa_control("resnet", "1Gbps,0.1ms", workers=2, rounds=6, block=2)
    assert len(row["ratios"]) == 6 and row["rounds"] == 6
    assert row["95% low"] <= row["ratio"] <= row["95% high"]
    assert row["contains 1"] == (row["95% low"] <= 1 <= row["95% high"])
    assert row["made"]["link"] == "modeled" and row["made"]["clock"] == {"ms/step": "wall"}
