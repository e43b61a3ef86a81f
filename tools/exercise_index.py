"""Generate the book's exercise index from the notebooks: ``book/exercise_index.md``.

    python tools/exercise_index.py            # (re)write book/exercise_index.md
    python tools/exercise_index.py --check    # exit 1 if the committed page is stale

Every notebook under ``book/NN_part/`` is scanned. Its exercises are the numbered items of the
markdown after a ``## Exercises`` heading (up to the next ``#``/``##`` heading), in one cell or
spread over several; a solution is a ``{admonition} Solution`` fence (hidden in the book by
``:class: dropdown``; ``is_solution`` is the one test, which tools/student_copy.py uses to remove
them). A solution fence that follows several exercises and holds a numbered list answers them by
number; any other solution fence answers the exercise just before it.

Each notebook's row links to its Exercises section, not to the top of the page: to the id Sphinx
gives that heading, ``docutils.nodes.make_id("Exercises")`` = ``exercises`` (the id of the
``<section>`` in the built HTML). MyST resolves a link to a heading of another document
(``[text](page.ipynb#exercises)``) only with ``myst_heading_anchors`` set in _config.yml, and
``{ref}`` needs a label in the notebook, so the link is an HTML anchor; ``exercises_anchor``
refuses a notebook in which an earlier heading already takes that id.

Difficulty, expected time and "needs a GPU" are never typed into the page: they come from an
optional tag in the exercise's text, an HTML comment that neither Jupyter nor the book shows,

    3. Rerun the sweep with eight workers. <!-- exercise: difficulty=3 time=40 gpu=yes -->

and, for whatever the tag leaves out, from simple rules on the text: ``RULES`` below, which the
generated page and the course guide (book/course_guide.md) both state word for word.
"""
from __future__ import annotations

import argparse
import html
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from docutils.nodes import make_id
from markdown_it import MarkdownIt
from mdit_py_plugins.colon_fence import colon_fence_plugin

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
OUT = BOOK / "exercise_index.md"

LONG_SOLUTION_WORDS = 90
TOPIC_WORDS = 16      # a topic is cut after this many words
MIN_TOPIC_WORDS = 9   # and runs on to the next sentence while it is shorter than this
LEVELS = {1: "easy", 2: "medium", 3: "hard"}

# an imperative at the start of a clause: "Run ...", "In the ablation, run ...", but not
# "in the long run"
HANDS_ON = re.compile(r"(?:^|[.?!:;,(]\s*|\b(?:and|then)\s+)"
                      r"(?:run|rerun|re-run|train|modify|rewrite|build|implement|add|set|change)\b",
                      re.IGNORECASE)
CODE_TO_RUN = re.compile(r"`[^`]*?[\w.]+\([^`]*`|python -m")  # a call or a command in code
PROOF = re.compile(r"\b(show that|prove|derive)\b", re.IGNORECASE)
GPU = re.compile(r"LAB_PROFILE\s*=\s*gpu|\bcuda\b|\bGPU machine\b|\bon (?:a|the|your) GPUs?\b",
                 re.IGNORECASE)
TAG = re.compile(r"<!--\s*exercise:(.*?)-->", re.DOTALL)
EXERCISES = re.compile(r"^##\s+Exercises\s*$", re.MULTILINE)
HEADING = re.compile(r"^#{1,2}\s", re.MULTILINE)
LABEL = re.compile(r"^\(([^()\s]+)\)=\s*$", re.MULTILINE)
ANCHOR = make_id("Exercises")   # "exercises": the id of the section in the built HTML
SOLUTION_DIRECTIVES = ("admonition", "dropdown")
# Inline MyST that must never be cut: roles, code spans and math. A word is a run of those and
# of other characters up to a space outside them.
SPAN = r"\{[\w:-]+\}`[^`]*`|`[^`]*`|\$\$.*?\$\$|\$[^$]*\$"
ATOM = re.compile(rf"(?:{SPAN}|[^\s$`])+", re.DOTALL)

RULES = f"""\
- **hands-on**: the exercise asks to run or change code (a clause that starts with *run*,
  *rerun*, *train*, *modify*, *rewrite*, *build*, *implement*, *add*, *set* or *change*), or it
  or its solution shows a call (`f(...)` in code) or a `python -m` command;
- **long answer**: it asks for a proof or derivation (*show that*, *prove*, *derive*), or its
  solution is longer than {LONG_SOLUTION_WORDS} words (a formula counts as one word);
- **difficulty** = 1 + hands-on + long answer: 1 easy, 2 medium, 3 hard;
- **time** = 10 minutes, plus 15 if hands-on, plus 10 if long answer, in the default `ci`
  profile (a run takes about a minute on two CPU cores);
- **needs a GPU**: the exercise mentions `LAB_PROFILE=gpu`, `cuda`, a GPU machine or running on a
  GPU; otherwise it runs on a CPU.
"""

# commonmark plus MyST's colon fences (the book enables colon_fence), so that a ``:::`` fence
# is one block here as in the book
_md = MarkdownIt("commonmark").use(colon_fence_plugin)


def is_solution(tok) -> bool:
    """A fence token that holds a solution: ``{admonition} Solution`` (or ``{dropdown}``)."""
    m = re.match(r"\{([\w-]+)\}", tok.info)
    return (tok.type in ("fence", "colon_fence") and m is not None
            and m.group(1) in SOLUTION_DIRECTIVES and "Solution" in tok.info)


@dataclass
class Exercise:
    number: int
    text: str
    solution: str | None = None
    solution_hidden: bool = False

    @property
    def tag(self) -> dict[str, str]:
        m = TAG.search(self.text)
        if not m:
            return {}
        return dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv)

    @property
    def hands_on(self) -> bool:
        return bool(HANDS_ON.search(_plain(self.text))
                    or CODE_TO_RUN.search(TAG.sub("", self.text) + (self.solution or "")))

    @property
    def long_answer(self) -> bool:
        return (bool(PROOF.search(_plain(self.text)))
                or _words(self.solution or "") > LONG_SOLUTION_WORDS)

    @property
    def kind(self) -> str:
        return "hands-on" if self.hands_on else "pen and paper"

    @property
    def difficulty(self) -> int:
        if "difficulty" in self.tag:
            return int(self.tag["difficulty"])
        return 1 + self.hands_on + self.long_answer

    @property
    def minutes(self) -> int:
        if "time" in self.tag:
            return int(self.tag["time"])
        return 10 + 15 * self.hands_on + 10 * self.long_answer

    @property
    def gpu(self) -> bool:
        if "gpu" in self.tag:
            return self.tag["gpu"].lower() in ("yes", "true", "1")
        return bool(GPU.search(TAG.sub("", self.text)))


@dataclass
class Notebook:
    path: Path
    title: str
    exercises: list[Exercise] = field(default_factory=list)
    anchor: str = ANCHOR

    @property
    def docname(self) -> str:  # relative to book/, no suffix, as {doc} wants it
        return self.path.relative_to(BOOK).with_suffix("").as_posix()

    @property
    def href(self) -> str:
        """The link from book/exercise_index.html to this notebook's Exercises section."""
        return f"{self.docname}.html#{self.anchor}"


def _plain(text: str) -> str:
    """Text without tags, math and code spans (a `set` in code is not the verb)."""
    text = TAG.sub("", text)
    return re.sub(r"\$\$.*?\$\$|\$[^$]*\$|`[^`]*`", " ", text, flags=re.DOTALL)


def _words(text: str) -> int:
    return len(ATOM.findall(text))


def _cells(nb_path: Path) -> list[str]:
    nb = json.loads(nb_path.read_text(encoding="utf8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


def _item_text(lines: list[str], start: int, end: int) -> str:
    body = "\n".join(lines[start:end]).strip()
    return re.sub(r"^\d+[.)]\s*", "", body)


def _solution_body(fence_content: str) -> tuple[str, bool]:
    opts, body, in_opts = [], [], True
    for line in fence_content.splitlines():
        if in_opts and line.startswith(":"):
            opts.append(line)
            continue
        in_opts = False
        body.append(line)
    hidden = any(re.match(r":class:.*\bdropdown\b", o) for o in opts)
    return "\n".join(body).strip(), hidden


def exercises_anchor(cells: list[str]) -> str:
    """The HTML id of the notebook's ``## Exercises`` section: ``ANCHOR``, unless a heading or a
    MyST label ``(name)=`` before it already has that id (docutils would then number the
    section ``id1``, ...)."""
    for cell in cells:
        tokens = _md.parse(cell)
        for tok, nxt in zip(tokens, tokens[1:]):
            if tok.type == "heading_open" and nxt.type == "inline":
                if tok.tag == "h2" and nxt.content.strip() == "Exercises":
                    return ANCHOR
                name = nxt.content
            elif tok.type == "paragraph_open" and nxt.type == "inline":
                label = LABEL.match(nxt.content.splitlines()[0] if nxt.content else "")
                if not label:
                    continue
                name = label.group(1)
            else:
                continue
            if make_id(name) == ANCHOR:
                raise ValueError(f"{name!r} takes the id {ANCHOR!r} before the Exercises "
                                 "heading: rename it")
    raise ValueError("no Exercises heading")


def _numbered_items(text: str) -> dict[int, str]:
    """Top-level numbered items of a markdown text, by number."""
    lines, items = text.splitlines(), {}
    tokens = _md.parse(text)
    for tok in tokens:
        if tok.type == "list_item_open" and tok.level == 1 and tok.info.isdigit() and tok.map:
            items[int(tok.info)] = _item_text(lines, *tok.map)
    return items


def parse_exercises(cells: list[str]) -> list[Exercise] | None:
    """The exercises of one notebook's markdown cells; None if it has no Exercises section."""
    section, found = [], False
    for cell in cells:
        if not found:
            m = EXERCISES.search(cell)
            if not m:
                continue
            found, cell = True, cell[m.end():]
        stop = HEADING.search(cell)
        section.append(cell[:stop.start()] if stop else cell)
        if stop:
            break
    if not found:
        return None
    exercises: list[Exercise] = []
    for cell in section:
        lines = cell.splitlines()
        for tok in _md.parse(cell):
            if tok.type == "list_item_open" and tok.level == 1 and tok.info.isdigit() and tok.map:
                exercises.append(Exercise(int(tok.info), _item_text(lines, *tok.map)))
            elif is_solution(tok):
                body, hidden = _solution_body(tok.content)
                hidden = hidden or tok.info.startswith("{dropdown}")
                pending = [e for e in exercises if e.solution is None]
                numbered = _numbered_items(body)
                if len(pending) > 1 and numbered:
                    for e in pending:
                        if e.number in numbered:
                            e.solution, e.solution_hidden = numbered[e.number], hidden
                elif pending:
                    pending[-1].solution, pending[-1].solution_hidden = body, hidden
    return exercises


def _title(cells: list[str], fallback: str) -> str:
    for cell in cells:
        m = re.search(r"^#\s+(.+?)\s*$", cell, re.MULTILINE)
        if m:
            return m.group(1)
    return fallback


def scan(book: Path = BOOK) -> list[Notebook]:
    """Every notebook under book/NN_*/ that has an Exercises section, in reading order."""
    found = []
    for path in sorted(book.glob("[0-9][0-9]_*/*.ipynb")):
        cells = _cells(path)
        exercises = parse_exercises(cells)
        if exercises is not None:
            try:
                anchor = exercises_anchor(cells)
            except ValueError as e:
                raise ValueError(f"{path.relative_to(ROOT)}: {e}") from None
            found.append(Notebook(path, _title(cells, path.stem), exercises, anchor))
    return found


def _escape_math(math: str) -> str:
    # a | would end the table cell; \vert and \Vert draw the same bars
    return math.replace(r"\|", r"\Vert{}").replace("|", r"\vert{}")


def topic(ex: Exercise, notebook: Notebook) -> str:
    """A short topic: the exercise's italic lead-in if it has one, else its first sentence (and
    the next ones while it is shorter than MIN_TOPIC_WORDS), cut after TOPIC_WORDS words; roles,
    code and math are kept whole."""
    text = " ".join(TAG.sub("", ex.text).split())
    lead = re.match(r"\*([^*]+?)\.?\*", text)
    if lead:
        return lead.group(1)
    out, cut = [], False
    for atom in ATOM.findall(text):
        if len(out) == TOPIC_WORDS:
            cut = True
            break
        out.append(atom)
        if re.search(r"[.?!]$", atom) and len(out) >= MIN_TOPIC_WORDS:
            break
    parent = notebook.path.parent.relative_to(ROOT).as_posix()

    def fix(m: re.Match) -> str:
        span = m.group(0)
        if span.startswith("$"):
            return _escape_math(span)
        if span.startswith("{doc}`") and not span.startswith("{doc}`/"):
            # {doc} paths are relative to the notebook; the index lives elsewhere
            inner = span[len("{doc}`"):-1]
            t = re.fullmatch(r"(.*?)\s*<([^>]+)>", inner)
            if t:
                return f"{{doc}}`{t.group(1)} </{parent}/{t.group(2)}>`"
            return f"{{doc}}`/{parent}/{inner}`"
        if span.startswith(("`", "{")):
            return span
        return span.replace("|", r"\|")

    words = [re.sub(rf"{SPAN}|[^$`{{]+|.", fix, atom, flags=re.DOTALL) for atom in out]
    return " ".join(words) + (" …" if cut else "")


def _part_title(part_dir: Path) -> str:
    overview = part_dir / "overview.md"
    if overview.exists():
        m = re.search(r"^#\s+(.+?)\s*$", overview.read_text(encoding="utf8"), re.MULTILINE)
        if m:
            return m.group(1)
    return part_dir.name


def render(notebooks: list[Notebook] | None = None) -> str:
    notebooks = scan() if notebooks is None else notebooks
    parts: dict[Path, list[Notebook]] = {}
    for nb in notebooks:
        parts.setdefault(nb.path.parent, []).append(nb)
    every = [e for nb in notebooks for e in nb.exercises]
    out = [
        "% GENERATED by tools/exercise_index.py from the notebooks' Exercises sections.",
        "% Do not edit by hand: run `python tools/exercise_index.py` after changing an exercise.",
        "",
        "(exercise-index)=",
        "# Exercise index",
        "",
        f"Every exercise in the book: {len(every)} exercises in {len(notebooks)} notebooks, "
        f"{sum(e.hands_on for e in every)} of them hands-on. Each notebook ends with its "
        "exercises and their solutions, which the book hides until you click them; a "
        "notebook's title below opens its exercises. This page "
        "is generated from the notebooks by `tools/exercise_index.py`; the difficulty, the "
        "time and the GPU column come from a tag in the exercise where it has one, otherwise "
        "from these rules on the exercise's text (details in {ref}`course-guide-exercises`):",
        "",
        RULES.rstrip(),
        "",
        "| Part | Notebooks | Exercises | Hands-on | Total time |",
        "|---|---:|---:|---:|---:|",
    ]
    for part_dir, nbs in parts.items():
        exs = [e for nb in nbs for e in nb.exercises]
        num = int(part_dir.name[:2])
        out.append(f"| {{ref}}`Part {num}: {_part_title(part_dir)} <exercises-part-{num}>` | "
                   f"{len(nbs)} | {len(exs)} | {sum(e.hands_on for e in exs)} | "
                   f"{sum(e.minutes for e in exs) / 60:.1f} h |")
    for part_dir, nbs in parts.items():
        num = int(part_dir.name[:2])
        out += ["", f"(exercises-part-{num})=", f"## Part {num}: {_part_title(part_dir)}", "",
                "| Notebook | # | Topic | Kind | Difficulty | Time | GPU |",
                "|---|---:|---|---|---|---:|---|"]
        for nb in nbs:
            for i, ex in enumerate(nb.exercises):
                link = (f'<a href="{html.escape(nb.href)}">{html.escape(nb.title, quote=False)}</a>'
                        if i == 0 else "")
                out.append(f"| {link} | {ex.number} | {topic(ex, nb)} | {ex.kind} | "
                           f"{LEVELS.get(ex.difficulty, ex.difficulty)} | {ex.minutes} min | "
                           f"{'yes' if ex.gpu else 'no'} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if book/exercise_index.md is stale")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf8") != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run python tools/exercise_index.py")
            return 1
        return 0
    OUT.write_text(text, encoding="utf8")
    notebooks = scan()
    print(f"wrote {OUT.relative_to(ROOT)}: {sum(len(nb.exercises) for nb in notebooks)} "
          f"exercises in {len(notebooks)} notebooks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
