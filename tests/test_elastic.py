"""A worker lost between outer steps (lab.train.elastic): a real SIGKILL, the survivors resume."""
import json

import pytest
import torch

from lab.run.checkpoint import load as load_ck, latest, read_meta
from lab.train.elastic import shrink, train_losing_a_worker
from lab.train import TrainConfig, train

H = 5
CFG = TrainConfig(model="mlp", data="digits", steps=60, batch_size=24, lr=3e-3, optimizer="adam",
                  eval_every=10, seed=1, averaging="diloco", averaging_kw={"period": H})


@pytest.fixture(scope="module")
def lost(tmp_path_factory):
    d = tmp_path_factory.mktemp("elastic")
    h, ev = train_losing_a_worker(CFG, 4, lose=1, after_step=20, directory=d, progress=False)
    return h, ev, d


def test_rank_is_killed_and_survivors_finish_every_step(lost):
    h, ev, d = lost
    assert "SIGKILL" in ev["cause"] and ev["lost_rank"] == 1 and ev["workers_after"] == 3
    assert ev["resumed_from_step"] >= 20 and ev["resumed_from_step"] % H == 0  # an outer step
    assert h.steps == CFG.steps and len(h.loss) == CFG.steps


def test_history_before_the_fault_is_the_uninterrupted_run(lost):
    h, ev, _ = lost
    ref = train(CFG, 4, progress=False)
    s = ev["resumed_from_step"]
    assert h.loss[:s] == ref.loss[:s] and h.bytes[:s] == ref.bytes[:s]


def test_survivors_hold_one_model_after_the_last_outer_step(lost):
    _, _, d = lost
    ck = latest(d / "3-ranks")
    assert read_meta(ck)["world_size"] == 3 and read_meta(ck)["step"] == CFG.steps
    models = [load_ck(ck, r)["model"] for r in range(3)]
    for k in models[0]:
        assert torch.equal(models[0][k], models[1][k]) and torch.equal(models[0][k], models[2][k])


def test_shrink_renumbers_and_names_bad_arguments(tmp_path):
    src = tmp_path / "step-00000005"
    src.mkdir()
    for r in range(3):
        torch.save({"rank": r}, src / f"rank{r}.pt")
    (src / "meta.json").write_text(json.dumps({"kind": "train", "step": 5, "world_size": 3,
                                               "config": {}}))
    out = shrink(src, 1, tmp_path / "out")
    assert read_meta(out)["world_size"] == 2
    assert [load_ck(out, r)["rank"] for r in range(2)] == [0, 2]
    with pytest.raises(ValueError, match="lost"):
        shrink(src, 3, tmp_path / "bad")
    with pytest.raises(ValueError, match="lose"):
        train_losing_a_worker(CFG, 4, 0, 5, tmp_path)
    with pytest.raises(ValueError, match="period"):
        train_losing_a_worker(CFG.with_(averaging="none", averaging_kw={}), 4, 1, 5, tmp_path)
    with pytest.raises(ValueError, match="batch_size"):
        train_losing_a_worker(CFG.with_(batch_size=16), 4, 1, 5, tmp_path)


def test_cli_elastic_fault_drill(tmp_path, capsys):
    from lab.cli.train import main
    rc = main(["--averaging", "diloco", "--averaging-kw", "period=5", "--optimizer", "adam",
               "--lr", "3e-3", "--steps", "30", "--batch-size", "24", "--workers", "4",
               "--eval-every", "10", "--elastic", "--lose-rank", "2", "--lose-after", "10",
               "--out", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert rc == 0 and "rank 2 lost" in out and "3 ranks resumed" in out
    hist = json.loads((tmp_path / "run" / "history.json").read_text())
    assert len(hist["loss"]) == 30
    assert sorted(p.name for p in (tmp_path / "run" / "elastic").iterdir()) == ["3-ranks", "4-ranks"]


@pytest.mark.parametrize("flags,says", [(["--lose-rank", "2", "--lose-after", "5"], "need --elastic"),
                                        (["--elastic", "--lose-rank", "2"], "go together"),
                                        (["--elastic", "--lose-rank", "9", "--lose-after", "5"], "lose-rank")])
def test_cli_elastic_refuses_bad_flags(tmp_path, capsys, flags, says):
    from lab.cli.train import main
    rc = main(["--averaging", "diloco", "--averaging-kw", "period=5", "--workers", "4",
               "--batch-size", "24", "--out", str(tmp_path / "r")] + flags)
    assert rc == 2 and says in capsys.readouterr().err
