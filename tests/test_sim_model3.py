"""lab.sim's third model (issue 52): a full-duplex parameter server, a repeated calibration.

The server's NIC carries pushes in and pulls out at once, so on a link-bound cluster ``p - 1``
workers cost it ``p - 1`` one-way transfers, half the serial model's; one worker can overlap
nothing and pays its whole cycle either way. A repeated profile is the median of its runs, and
the third model prices a profile's means over steps (a measured step is a mean)."""
import math

import pytest

from lab.sim import Cluster, Config, predict
from lab.sim import calibrate, validate

SHAPES = ((256, 128), (128,), (10, 128), (10,))
N = sum(math.prod(s) for s in SHAPES)


def _ps(ranks, bandwidth, duplex, compute=1e-3):
    return predict(Config(SHAPES, "async-ps", Cluster(ranks, bandwidth), compute,
                          server_duplex=duplex)).step_s


def test_one_worker_pays_its_whole_cycle_either_way():
    one_way = 4.0 * N / 1e7
    assert _ps(2, 1e7, True) == pytest.approx(1e-3 + 2 * one_way)
    assert _ps(2, 1e7, True) == pytest.approx(_ps(2, 1e7, False))


def test_a_link_bound_server_takes_half_as_long_in_full_duplex():
    serial, duplex = _ps(8, 1e6, False, 0.0), _ps(8, 1e6, True, 0.0)
    assert duplex == pytest.approx(serial / 2)
    assert duplex == pytest.approx(7 * 4.0 * N / 1e6)   # 7 workers' pulls out, one after another


def test_combine_takes_medians_and_reports_the_spread():
    runs = [{"compute_s": c, "floor_per_round_s": 1e-4, "exchange_s": 2e-4, "shapes": [[2]],
             "compute_mean_s": c, "floor_per_round_mean_s": 1e-4, "exchange_mean_s": 2e-4}
            for c in (1e-3, 3e-3, 2e-3)]
    out = calibrate.combine(runs)
    assert out["compute_s"] == 2e-3 and out["shapes"] == [[2]]
    assert out["spread"]["compute_s"] == pytest.approx(3.0)
    assert out["spread"]["exchange_s"] == pytest.approx(1.0)
    assert len(out["runs"]) == 3
    with pytest.raises(ValueError, match="runs"):
        calibrate.combine([])


def test_local_sgd_runs_whole_periods():
    assert validate.steps_for("local-sgd", 12) == 17 and validate.steps_for("local-sgd", 30) == 33
    assert validate.steps_for("fp32", 30) == 30


def test_model_3_prices_the_server_in_full_duplex_and_keeps_the_exchange_term():
    row = {"technique": "async-ps", "model": "mlp", "world": 6, "link": "100Mbps,0ms"}
    prof = {"compute_s": 1e-3, "floor_per_round_s": 0.0, "exchange_s": 5e-4,
            "compute_mean_s": 1e-3, "floor_per_round_mean_s": 0.0, "exchange_mean_s": 5e-4,
            "shapes": [list(s) for s in SHAPES]}
    calib = {"profiles": {"mlp:6": prof}, "codecs": {}, "cores": 2}
    two, three = (validate.predict_one(row, dict(calib, model=m)) for m in (2, 3))
    assert three < two
    fp32 = dict(row, technique="fp32")
    assert validate.predict_one(fp32, dict(calib, model=3)) == \
        pytest.approx(validate.predict_one(fp32, dict(calib, model=2)))


def test_model_3_prices_the_profiles_means():
    row = {"technique": "fp32", "model": "mlp", "world": 4, "link": "5000Mbps,0ms"}
    prof = {"compute_s": 1e-3, "floor_per_round_s": 0.0, "exchange_s": 0.0,
            "compute_mean_s": 3e-3, "floor_per_round_mean_s": 0.0, "exchange_mean_s": 0.0,
            "shapes": [list(s) for s in SHAPES]}
    calib = {"profiles": {"mlp:4": prof}, "codecs": {}, "cores": 2}
    two, three = (validate.predict_one(row, dict(calib, model=m)) for m in (2, 3))
    assert three - two == pytest.approx(2e-3)


def test_the_cli_refuses_two_draws(capsys):
    from lab.cli.sim import main
    with pytest.raises(SystemExit):
        main(["--validate", "--fresh", "--third"])
    assert "--third" in capsys.readouterr().err


def test_the_third_draw_is_the_stored_seed_54_draw():
    import json
    stored = json.loads(validate.THIRD_DRAWN.read_text())
    assert stored["seed"] == 54 and stored["configs"] == validate.draw(seed=54)
    assert stored["_meta"]["command"].endswith("--third")
