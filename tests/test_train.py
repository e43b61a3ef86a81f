"""Training: 1, 2 and 4 workers give the same run at the same global batch; configs are
checked before any process starts; the CLI writes its outputs."""
import json
import subprocess
import sys

import pytest
import torch

from lab import data as data_mod, models
from lab.train import History, TrainConfig, train, train_many

CFG = TrainConfig(model="mlp", data="digits", steps=30, batch_size=64, lr=0.2, eval_every=10)


def test_data_parallel_equals_one_process_at_the_same_global_batch():
    one = train(CFG, 1)
    two, four = train_many([CFG], 2)[0], train(CFG, 4)
    for h in (two, four):
        assert h.loss == pytest.approx(one.loss, rel=1e-5, abs=1e-6)
        assert h.test_acc == pytest.approx(one.test_acc, abs=1e-6)
    assert one.bytes == [0] * 30                    # nothing to exchange alone
    n = sum(p.numel() for p in models.make("mlp", data_mod.load("digits")).parameters())
    assert four.bytes == [4 * n] * 30               # one fp32 allreduce per step
    assert four.rank_bytes == [4 * n * 30] * 4


def test_many_configs_in_one_launch_and_fp16_halves_the_bytes():
    fp32, fp16, ef = train_many([CFG, CFG.with_(compressor="fp16"),
                                 CFG.with_(compressor="fp16", error_feedback=True)], 2)
    assert fp16.bytes_per_step == fp32.bytes_per_step / 2 == ef.bytes_per_step
    assert abs(fp16.final_acc - fp32.final_acc) < 0.05
    assert fp32.final_acc > 0.6


def test_aggregators_with_their_own_compression_train_from_a_config():
    cfgs = [CFG.with_(aggregator=a, lr=lr, steps=10, eval_every=0)
            for a, lr in [("majority_vote", 0.01), ("signum", 0.01), ("dist_ef_sgd", 0.1),
                          ("terngrad_shared", 0.1)]]
    hs = train_many(cfgs, 2)
    assert [h.name for h in hs] == ["majority_vote", "signum", "dist_ef_sgd", "terngrad_shared"]
    assert all(h.loss[-1] < h.loss[0] and h.bytes[0] > 0 for h in hs)
    with pytest.raises(ValueError, match="does its own compression"):
        CFG.with_(aggregator="majority_vote", compressor="topk")


def test_every_model_trains_a_few_steps_on_its_data():
    for model, data in [("cnn", "digits"), ("vgg", "digits"), ("resnet", "digits"),
                        ("linear", "linreg"), ("mlp", "blobs"), ("gpt", "text")]:
        cfg = TrainConfig(model=model, data=data, steps=2, batch_size=8, lr=0.01, eval_every=0)
        d = data_mod.load(data)
        m = models.make(model, d)
        x, y = d.batch(0, 8)
        loss = models.loss_fn(d.task)(m(x), y)
        loss.backward()
        assert torch.isfinite(loss) and cfg.name == "none"


@pytest.mark.parametrize("kw, match", [
    ({"model": "resnet50"}, "unknown model model='resnet50'"),
    ({"data": "mnist"}, "unknown dataset data='mnist'"),
    ({"compressor": "top_k"}, "did you mean 'topk'"),
    ({"aggregator": "krum9"}, "unknown aggregator"),
    ({"steps": 0}, "steps"),
    ({"batch_size": -4}, "batch_size"),
    ({"lr": 0}, "lr"),
    ({"optimizer": "lion"}, "optimizer"),
    ({"network": "fast"}, "not understood"),
    ({"momentum": 1.5}, "momentum"),
    ({"compressor": "qsgd", "compressor_kw": {"levels": 15}},
     r"compressor_kw: compressor 'qsgd': unknown argument 'levels' \(its arguments: s, bucket_size"),
    ({"compressor": "topk", "compressor_kw": {"densty": 0.1}}, "did you mean 'density'"),
    ({"averaging": "local", "averaging_kw": {"engine": None}}, "its arguments: period, warmup"),
])
def test_bad_configs_name_the_argument(kw, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kw)


def test_config_that_cannot_work_is_refused_before_launch():
    with pytest.raises(ValueError, match=r"batch_size \(64\) must be divisible by workers \(3\)"):
        train(CFG, 3)
    with pytest.raises(ValueError, match="workers"):
        train(CFG, 0)
    with pytest.raises(ValueError, match="does not fit data"):
        models.make("gpt", data_mod.load("digits"))


def test_nan_loss_stops_the_run_with_a_clear_error():
    from lab.runtime import LaunchError
    with pytest.raises(LaunchError, match="loss is"):
        train(CFG.with_(lr=1e30, steps=5), 1)


def test_cli_trains_and_writes_history_csv_and_plot(tmp_path):
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "lab", "train", "--workers", "2", "--steps", "10",
                        "--compressor", "fp16", "--network", "1Gbps", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "fp16" in r.stdout and "bytes/step" in r.stdout
    h = History.from_json(out / "history.json")
    assert h.steps == 10 and h.world_size == 2 and h.modeled_comm_s[0] > 0
    assert (out / "history.csv").read_text().count("\n") == 11
    assert (out / "plot.png").stat().st_size > 10_000
    bad = subprocess.run([sys.executable, "-m", "lab", "train", "--compressor", "nope"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown compressor" in bad.stderr


def test_history_round_trips_through_json(tmp_path):
    h = History({"label": "x"}, 2, loss=[1.0, 0.5], bytes=[8, 8], compute_s=[0.1, 0.1],
                codec_s=[0, 0], comm_s=[0.2, 0.2], modeled_comm_s=[0, 0], eval_step=[2],
                test_loss=[0.4], test_acc=[0.9])
    h.to_json(tmp_path / "h.json")
    back = History.from_json(tmp_path / "h.json")
    assert back == h and back.time_to(0.85) == pytest.approx(0.6) and back.time_to(0.95) == float("inf")
    assert back.time_to(0.85, clock="modeled") == pytest.approx(0.2)
    assert json.loads((tmp_path / "h.json").read_text())["world_size"] == 2


def test_the_same_entry_point_runs_under_torchrun(tmp_path):
    out = tmp_path / "tr"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    r = subprocess.run(torchrun + ["-m", "lab", "train", "--steps", "6", "--compressor", "fp16",
                                   "--out", str(out)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    h = History.from_json(out / "history.json")
    assert h.world_size == 2 and h.steps == 6 and h.bytes[0] > 0 and len(h.rank_bytes) == 2


def test_torchrun_checkpoints_and_resumes_bitwise(tmp_path):
    import shutil
    import torch
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd = torchrun + ["-m", "lab", "train", "--steps", "6", "--momentum", "0.9"]
    full, half = tmp_path / "full", tmp_path / "half"
    r = subprocess.run(cmd + ["--checkpoint-every", "3", "--out", str(full)], capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    shutil.copytree(full / "checkpoint" / "step-00000003", half / "checkpoint" / "step-00000003")
    r = subprocess.run(cmd + ["--checkpoint-every", "6", "--resume", str(half), "--out", str(half)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    for rank in (0, 1):
        a, b = (torch.load(d / "checkpoint" / "step-00000006" / f"rank{rank}.pt",
                           weights_only=False)["model"] for d in (full, half))
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert History.from_json(half / "history.json").loss == History.from_json(full / "history.json").loss


def test_summary_table_shows_overlapped_communication_only_where_a_schedule_records_it():
    from lab.textable import format_rows
    from lab.train.history import History
    plain, ov = History({"label": "sync"}, 2), History({"label": "p3"}, 2)
    for h in (plain, ov):
        h.loss, h.bytes, h.compute_s, h.codec_s, h.comm_s, h.modeled_comm_s = [1.0], [8], [0.1], [0.0], [0.2], [0.2]
    ov.record({"overlapped_comm_s": 0.05})
    assert "overlapped comm ms/step" not in plain.summary()
    assert ov.summary()["overlapped comm ms/step"] == 50.0
    table = format_rows([plain.summary(), ov.summary()]).splitlines()
    assert table[0].rstrip().endswith("overlapped comm ms/step") and table[2].rstrip().endswith("-")
