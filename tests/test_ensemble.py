"""Ensembles on shards and their distillation, in real processes."""
import json

import pytest

from lab.averaging import ensemble
from lab.cli.ensemble import main
from lab.train import TrainConfig

import lab.data


def test_shards_are_disjoint_and_cover_equal_parts():
    data = lab.data.load("digits")
    parts = [ensemble.shard(data, r, 3) for r in range(3)]
    n = len(data.x_train) // 3
    assert all(len(p.x_train) == n for p in parts)
    assert (parts[0].x_train[-1] != parts[1].x_train[0]).any()


def test_ensemble_cli_trains_members_and_distils(capsys):
    assert main(["--workers", "3", "--steps", "60", "--distill-steps", "120",
                 "--batch-size", "48", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert len(r["member_acc"]) == 3 and 0 <= r["student_acc"] <= 1
    # the ensemble votes with mean logits: it beats the average member on digits
    assert r["ensemble_acc"] > sum(r["member_acc"]) / 3
    # the only traffic: each rank's logits on the transfer and test sets, fp32, 10 classes
    data = lab.data.load("digits")
    rows = len(data.x_train) + len(data.test_set()[0])
    assert r["rank_bytes"] == [rows * 10 * 4] * 3


@pytest.mark.parametrize("kw, match", [({"data": "linreg"}, "classification"),
                                       ({"distill_steps": -1}, "distill_steps")])
def test_bad_arguments_are_refused_before_launch(kw, match):
    cfg = TrainConfig(data=kw.get("data", "digits"), batch_size=12)
    with pytest.raises(ValueError, match=match):
        ensemble.train_ensemble(cfg, 3, kw.get("distill_steps", 10))
