"""The API reference's DDP hook script (book/api/hooks.md, a lab compressor as a DDP hook)
runs as written: two ranks, Top-k through DDP, far fewer bytes than fp32."""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_codec_hook_script_of_the_api_reference_runs(tmp_path):
    text = (ROOT / "book" / "api" / "hooks.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    script = next(b for b in blocks if "lab.hooks.codec_hook" in b)
    (tmp_path / "hook.py").write_text(script)
    r = subprocess.run([sys.executable, str(tmp_path / "hook.py")], capture_output=True,
                       text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = re.findall(r"rank (\d): (\d+) bytes a step through Top-k, (\d+) in fp32", r.stdout)
    assert [int(x[0]) for x in rows] == [0, 1], r.stdout
    for _, sent, dense in rows:
        assert 0 < int(sent) < int(dense) / 5   # 5% of the values, with their indices
