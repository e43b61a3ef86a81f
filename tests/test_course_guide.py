"""The course guide's exercise index is generated from the notebooks and cannot go stale.

book/exercise_index.md is written by tools/exercise_index.py; the committed page must equal a
fresh generation, list every notebook that has an Exercises section, and every exercise must
have a solution hidden behind a dropdown. The parser and the documented rules for difficulty,
time and GPU are checked on small made-up notebooks. Nothing here builds the book.
"""
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import exercise_index as ex  # noqa: E402


def test_committed_index_equals_a_fresh_generation():
    committed = ex.OUT.read_text(encoding="utf8")
    assert committed == ex.render(), (
        "book/exercise_index.md is stale: run python tools/exercise_index.py")


def test_every_notebook_with_an_exercises_section_appears():
    with_exercises = []
    for path in sorted((ROOT / "book").glob("*/*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf8"))["cells"]
        heading = re.compile(r"^##\s+Exercises\s*$", re.MULTILINE)
        if any(c["cell_type"] == "markdown" and heading.search("".join(c["source"])) for c in cells):
            with_exercises.append(path.relative_to(ROOT / "book").with_suffix("").as_posix())
    assert len(with_exercises) >= 29
    page = ex.OUT.read_text(encoding="utf8")
    parsed = {nb.docname: nb for nb in ex.scan()}
    for docname in with_exercises:
        assert f'<a href="{docname}.html#exercises">' in page, (
            f"{docname} is missing from the exercise index, or its link misses its exercises")
        numbers = [e.number for e in parsed[docname].exercises]
        assert numbers == list(range(1, len(numbers) + 1)) and numbers, (docname, numbers)


def test_every_exercise_has_a_hidden_solution():
    for nb in ex.scan():
        for e in nb.exercises:
            assert e.solution, f"{nb.docname} exercise {e.number} has no Solution admonition"
            assert e.solution_hidden, (
                f"{nb.docname} exercise {e.number}: its solution lacks :class: dropdown")


SOLUTION = "```{{admonition}} Solution\n:class: dropdown\n{}\n```\n"


def test_both_layouts_pair_exercises_with_their_solutions():
    # one Solution box after all exercises, numbered like them
    together = ["## Summary\n\nText.\n\n## Exercises\n\n1. *Warm up.* Why is $|x| \\ge 0$?\n"
                "2. Show that the sum is unbiased.\n   It takes two lines.\n\n"
                + SOLUTION.format("1. Because.\n2. " + "word " * 100)]
    # a Solution box after each exercise, exercises in cells of their own
    apart = ["## Exercises\n\n1. Run `python -m lab train --steps 5` in the long run.\n",
             SOLUTION.format("First answer."),
             "2. How does it go in the long run?\n" + SOLUTION.format("Second answer."),
             "## Afterword\n\n3. Not an exercise.\n"]
    a = ex.parse_exercises(together)
    assert [(e.number, e.solution) for e in a][0] == (1, "Because.")
    assert a[1].text.endswith("It takes two lines.") and a[1].solution.startswith("word")
    b = ex.parse_exercises(apart)
    assert [(e.number, e.solution) for e in b] == [(1, "First answer."), (2, "Second answer.")]
    assert ex.parse_exercises(["## Summary\n\n1. A list, not exercises.\n"]) is None
    nb = ex.Notebook(ROOT / "book" / "01_foundations" / "x.ipynb", "X", a)
    assert ex.topic(a[0], nb) == "Warm up"
    assert ex.topic(a[1], nb) == "Show that the sum is unbiased. It takes two lines."
    long = ex.Exercise(1, "Why is $|x| \\ge 0$ for every real number and every rank of every "
                          "process here?")
    assert ex.topic(long, nb).startswith("Why is $\\vert{}x\\vert{}")


def test_documented_rules_for_difficulty_time_and_gpu():
    pen = ex.Exercise(1, "How many bytes does a rank send in the long run?", "A short answer.")
    assert (pen.kind, pen.difficulty, pen.minutes, pen.gpu) == ("pen and paper", 1, 10, False)
    proof = ex.Exercise(1, "Show that the estimate is unbiased.", "Short.")
    assert (proof.difficulty, proof.minutes) == (2, 20)
    run = ex.Exercise(1, "In the ablation, run it with momentum 0.", "word " * 91)
    assert (run.kind, run.difficulty, run.minutes) == ("hands-on", 3, 35)
    call = ex.Exercise(1, "What does the model predict?", "Call `predict(sizes, 8)`.")
    assert call.hands_on
    gpu = ex.Exercise(1, "Rerun the sweep with `LAB_PROFILE=gpu`.", "Answer.")
    assert gpu.gpu and not ex.Exercise(1, "NCCL reports a bus bandwidth. Why?", "x").gpu
    tagged = ex.Exercise(1, "Rerun it. <!-- exercise: difficulty=1 time=45 gpu=yes -->", "x")
    assert (tagged.difficulty, tagged.minutes, tagged.gpu) == (1, 45, True)
    assert "exercise:" not in ex.topic(tagged, ex.Notebook(ROOT / "book" / "01_x" / "y.ipynb", "Y"))


def test_guide_and_index_come_first_and_launch_buttons_need_a_repository():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    first = [c["file"] for c in toc["parts"][0]["chapters"]]
    assert first[:2] == ["book/course_guide", "book/exercise_index"]
    guide = (ROOT / "book" / "course_guide.md").read_text(encoding="utf8")
    assert "{doc}`exercise_index`" in guide and "(course-guide-exercises)=" in guide
    # the guide states the rules the script applies, word for word
    assert " ".join(ex.RULES.split()) in " ".join(guide.split())
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    launch = config["launch_buttons"]
    urls = [launch.get(k) for k in ("binderhub_url", "jupyterhub_url", "colab_url")]
    # without repository.url, Jupyter Book would point every launch button at its own repository
    assert "url" in config["repository"]
    assert not any(urls) or config["repository"]["url"], "set repository.url before launch buttons"
