"""The stored validations score from the shell (issue 52): ``python -m lab sim --validate`` for the
seed-52 campaign (model 1) and ``--fresh`` for model 2 on its own seed-53 draw; the two draws are
disjoint seeds of the same generator, and a model-1 calibration ignores the exchange term."""
import json

import pytest

from lab.cli.sim import main
from lab.sim import validate


def _scored(capsys, *flags):
    assert main(["--validate", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_each_campaign_is_scored_by_its_own_model(capsys):
    first, fresh = _scored(capsys), _scored(capsys, "--fresh")
    assert first["all"]["configs"] == fresh["all"]["configs"] == 36
    assert fresh["_meta"]["command"].endswith("--fresh")
    assert json.loads(validate.FRESH.read_text())["calibration"]["model"] == 2
    assert first["all"]["geomean"] == validate.stored()["all"]["geomean"]
    assert fresh["all"]["geomean"] == validate.stored(validate.FRESH)["all"]["geomean"]


def test_the_fresh_draw_is_the_stored_seed_53_draw():
    stored = json.loads(validate.FRESH_DRAWN.read_text())
    assert stored["seed"] == 53 and stored["configs"] == validate.draw(seed=53)
    assert validate.draw(seed=53) != validate.draw(seed=52)


def test_model_1_ignores_the_exchange_term():
    data = json.loads(validate.FRESH.read_text())
    c = dict(data["calibration"], model=1)
    row = next(r for r in data["rows"] if r["technique"] == "fp32")
    prof = c["profiles"][f"{row['model']}:{row['world']}"]
    assert prof["exchange_s"] > 0
    two, one = validate.predict_one(row, data["calibration"]), validate.predict_one(row, c)
    assert two - one == pytest.approx(prof["exchange_s"])   # once per step: fp32 exchanges every step
