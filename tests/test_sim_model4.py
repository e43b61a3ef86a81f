"""lab.sim's fourth model (issue 52): an allgather's loopback floor is measured per call.

On this machine's loopback, ranks sharing cores make an allgather call cost about what fp32's
allreduce does, not ``p - 1`` of its ``2 (p - 1)`` rounds; model 4 takes the floor per call
from a signSGD reference run (:func:`lab.sim.calibrate.allgather_floor`). Only allgather
techniques change; the floor never undercuts the link."""
import math

import pytest

from lab.sim import Cluster, Config, calibrate, predict, validate

SHAPES = ((256, 128), (128,), (10, 128), (10,))


def _prof(**extra):
    base = {q: 0.0 for q in calibrate.QUANTITIES}
    base.update(compute_s=1e-3, compute_mean_s=1e-3, floor_per_round_s=1e-4,
                floor_per_round_mean_s=1e-4, shapes=[list(s) for s in SHAPES])
    return {**base, **extra}


def _calib(model, **extra):
    return {"profiles": {"mlp:5": _prof(**extra)}, "codecs": {}, "cores": 2, "model": model}


def test_model_4_prices_an_allgather_at_its_measured_floor_per_call():
    row = {"technique": "qsgd", "model": "mlp", "world": 5, "link": "5000Mbps,0ms"}
    floors = dict(allgather_call_s=2e-3, allgather_call_mean_s=3e-3)
    three, four = (validate.predict_one(row, _calib(m, **floors)) for m in (3, 4))
    assert three == pytest.approx(1e-3 + 4 * 1e-4, rel=0.05)   # p - 1 rounds of the allreduce's
    assert four - three == pytest.approx(3e-3 - 4 * 1e-4, rel=0.05)   # the means, model 3's rule


def test_model_4_leaves_allreduce_techniques_alone():
    row = {"technique": "fp32", "model": "mlp", "world": 5, "link": "500Mbps,0ms"}
    floors = dict(allgather_call_s=2e-3, allgather_call_mean_s=3e-3)
    assert validate.predict_one(row, _calib(4, **floors)) == \
        pytest.approx(validate.predict_one(row, _calib(3, **floors)))


def test_the_floor_never_undercuts_the_link():
    slow = Cluster.flat(4, "1Mbps")
    args = (SHAPES, "qsgd", slow, 1e-3)
    assert predict(Config(*args, floor_call_s=(("allgather", 1e-6),))).step_s == \
        pytest.approx(predict(Config(*args)).step_s)


def test_bad_floors_are_refused_by_name():
    with pytest.raises(ValueError, match="floor_call_s"):
        Config(SHAPES, "qsgd", Cluster.flat(4, "1Gbps"), 1e-3, floor_call_s=(("allgather", math.nan),))


def test_combine_keeps_the_allgather_floor_only_when_every_round_has_it():
    with_floor = [_prof(allgather_call_s=a, allgather_call_mean_s=a) for a in (1e-3, 2e-3, 4e-3)]
    assert calibrate.combine(with_floor)["allgather_call_s"] == 2e-3
    assert "allgather_call_s" not in calibrate.combine(with_floor[:2] + [_prof()])


def test_the_cli_refuses_two_draws_and_names_them(capsys):
    from lab.cli.sim import main
    with pytest.raises(SystemExit):
        main(["--validate", "--third", "--fourth"])
    assert "--third and --fourth" in capsys.readouterr().err


def test_the_fourth_draw_is_stored_seeded_and_scored_by_model_4():
    import json
    drawn = json.loads(validate.FOURTH_DRAWN.read_text())
    assert drawn["seed"] == 55 and drawn["configs"] == validate.draw(seed=55)
    data = json.loads(validate.FOURTH.read_text())
    assert data["calibration"]["model"] == 4
    assert [r["id"] for r in data["rows"]] == [c["id"] for c in drawn["configs"]]
    for prof in data["calibration"]["profiles"].values():   # six rounds, each with its floor
        assert len(prof["runs"]) == 6 and all("allgather_call_mean_s" in r for r in prof["runs"])
    res = validate.stored(validate.FOURTH)
    three = validate.score([dict(r) for r in data["rows"] if "measured_s" in r],
                           dict(data["calibration"], model=3))
    for f in ("dense", "low rank", "local SGD", "schedule", "parameter server"):
        assert res["families"][f]["geomean"] == pytest.approx(three["families"][f]["geomean"])
