"""The documentation holds: the pages the code cites exist, every results table is the one its
results.json renders, and every code block of README.md and docs/*.md runs.

How the code blocks run (`test_code_block`, one test a block, from the repository root, in a
subprocess on one CPU device):

- a ```python block runs as a script; a ```bash block runs with `bash -e`; other fences
  (```text, diagrams) are not code;
- every path /tmp/NAME names TMP/NAME, TMP a folder the test session shares, so that the
  workdirs the blocks train are those the other blocks read;
- a training command, `python train.py --config configs/C.py[:ARG] ...`, runs in its `:smoke`
  form for one epoch: `smoke` joins ARG and `--config.train.num_epochs=1` is added. The first
  block that names a workdir trained anywhere in the pages trains it (once a session, under a
  lock), so a block may read a workdir another page trains;
- a script of the speed suite or a study, `python -m benchmarks.S ...` or `python -m studies.S ...`,
  runs at its `--tiny` size (`studies.tables`, which reads files only, as written);
- a block is skipped only where its first line says why, in one of the forms of `SKIP_REASONS`
  (`# needs data: ...`, `# needs the network: ...`, `# needs PyTorch: ...`, `# runs the tests:
  ...`, `# needs a GPU: ...`), and the block must show it (a data folder, an install or a
  catalogue dataset, the PyTorch benchmarks, pytest, the device check);
  `test_only_marked_blocks_are_skipped` checks both.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from studies import tables
from tests.command_env import command_env
from tests.shared_tmp import locked, shared_folder

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "README.md", ROOT / "train.py"] + [
    path for folder in ("jcaps", "configs", "benchmarks", "studies", "recording", "tests")
    for path in sorted((ROOT / folder).rglob("*.py"))
]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```(\w+)?[^\n]*\n(.*?)^```\s*$", re.M | re.S)
TRAIN = re.compile(r"python train\.py --config (configs/\w+\.py)(?::([\w,-]+))?(.*?)--workdir (/tmp/[\w.-]+)")
# first-line comment of a block that is not run -> what the block must contain to show it
SKIP_REASONS = {
    "# needs data:": re.compile(r"--config\.data\.dir=|--data_dir|\.\./shared/data"),
    "# needs the network:": re.compile(r"pip install|python train\.py --config configs/\w+\.py --workdir \S+\s*$", re.M),
    "# needs PyTorch:": re.compile(r"benchmarks\.vs_pytorch|benchmarks\.vs_captum|\[compare\]"),
    "# runs the tests:": re.compile(r"pytest"),
    # its dry run is tests/benchmarks/test_device_check.py
    "# needs a GPU:": re.compile(r"benchmarks/device_check\.sh OUT"),
}
BLOCK_TIMEOUT = 600


def _citations(pattern: str) -> list[tuple[str, str]]:
    """(file:line, match) of every match of `pattern` in the sources."""
    found = []
    for path in SOURCES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [(f"{path.relative_to(ROOT)}:{number}", match) for match in re.findall(pattern, line)]
    return found


def test_every_cited_docs_page_exists():
    cited = _citations(r"docs/[\w-]+\.md")
    assert cited
    missing = [(where, page) for where, page in cited if not (ROOT / page).is_file()]
    assert not missing


def heading_anchor(heading: str) -> str:
    """The anchor MyST gives a heading (`myst_heading_anchors`): lower case, punctuation dropped,
    spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def page_sections(page: Path) -> dict[str, str]:
    """{anchor: the section's text} of every heading of `page` down to level 3: from the heading
    to the next heading of the same or a higher level."""
    text = page.read_text(encoding="utf-8")
    headings = [(len(m.group(1)), m.group(2), m.start()) for m in re.finditer(r"^(#{1,3}) (.+)$", text, re.M)]
    sections = {}
    for index, (level, title, start) in enumerate(headings):
        end = next((s for lv, _, s in headings[index + 1:] if lv <= level), len(text))
        anchor = heading_anchor(title)
        # A repeated heading's anchor gets -1, -2, ... as MyST numbers it.
        repeats = sum(1 for key in sections if re.fullmatch(rf"{re.escape(anchor)}(-\d+)?", key))
        sections[f"{anchor}-{repeats}" if repeats else anchor] = text[start:end]
    return sections


def test_every_cited_section_exists_and_holds_a_formula():
    """Code cites the equations it implements as `docs/<page>.md#<anchor>`; the section must be
    there and hold math ($...$), not only a heading. (Pages and the README cite sections of any
    kind: those must exist.)"""
    cited = _citations(r"docs/([\w-]+\.md)#([\w-]+)")
    assert cited
    pages = {page: page_sections(ROOT / "docs" / page) for page in {page for _, (page, _) in cited}}
    missing = [(where, f"{page}#{anchor}") for where, (page, anchor) in cited if anchor not in pages[page]]
    assert not missing
    without_math = [(where, f"{page}#{anchor}") for where, (page, anchor) in cited
                    if where.split(":")[0].endswith(".py") and not re.search(r"\$[^$\n]+\$", pages[page][anchor])]
    assert not without_math
    # The numbered sections of docs/models.md that point elsewhere are not cited as the equations.
    assert not _citations(r"docs/models\.md`? §[1-5]")


@pytest.mark.slow
def test_results_tables_match_their_files():
    result = subprocess.run([sys.executable, "-m", "studies.tables", "--check"], cwd=ROOT,
                            capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr


def tables_reading(monkeypatch, root: Path):
    """`studies.tables`, reading its results files under `root` instead of the repository's."""
    monkeypatch.setattr(tables, "ROOT", str(root))
    return tables


def test_a_table_without_its_results_file_is_a_one_line_error(monkeypatch, tmp_path):
    tables = tables_reading(monkeypatch, tmp_path)
    with pytest.raises(SystemExit, match=r"^table training_reuters: studies/training/results/reuters/results\.json "
                                         r"does not exist; run the benchmark or study that writes it$"):
        tables.render("training_reuters")


def test_list_says_which_results_files_lack_their_provenance(monkeypatch, tmp_path):
    tables = tables_reading(monkeypatch, tmp_path)
    (tmp_path / "new.json").write_text(json.dumps({"_run": {"commit": "abc1234", "date": "2026-01-02", "idle": True}}))
    edited = {"_run": {"commit": "abc1234", "dirty": True, "date": "2026-01-02"}}
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    (tmp_path / "old.json").write_text(json.dumps([{"seconds": 1.0}]))
    for study, results in (("a", {"_run": {"commit": "abc1234", "date": "2026-01-02"}}), ("b", {"rows": []})):
        (tmp_path / "study" / study).mkdir(parents=True)
        (tmp_path / "study" / study / "results.json").write_text(json.dumps(results))
    assert tables.recorded("new.json") == "commit abc1234, 2026-01-02, idle machine"
    assert tables.recorded("edited.json") == "commit abc1234 with uncommitted changes, 2026-01-02, busy machine"
    assert tables.recorded("old.json") == "provenance not recorded"
    assert tables.recorded("study/") == "provenance not recorded"  # one file of the folder lacks it


# ---------------------------------------------------------------------------------------------
# Code blocks
# ---------------------------------------------------------------------------------------------


def code_blocks() -> list[tuple[str, str, str]]:
    """(page:line, language, code) of every python and bash block of the pages."""
    blocks = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group(1) in ("python", "bash"):
                line = text.count("\n", 0, match.start()) + 1
                blocks.append((f"{page.relative_to(ROOT)}:{line}", match.group(1), match.group(2)))
    return blocks


BLOCKS = code_blocks()


def skip_reason(code: str) -> str | None:
    first = code.lstrip().splitlines()[0] if code.strip() else ""
    return next((reason for reason in SKIP_REASONS if first.startswith(reason)), None)


def smoke_form(code: str, tmp: str) -> str:
    """`code` as the tests run it (the module docstring's rule)."""

    def train(match: re.Match) -> str:
        config, arg, middle, workdir = match.groups()
        names = [n for n in (arg or "").split(",") if n] + ["smoke"]
        arg = ",".join(dict.fromkeys(names))
        return f"python train.py --config {config}:{arg} --config.train.num_epochs=1{middle}--workdir {workdir}"

    code = TRAIN.sub(train, code)
    code = re.sub(r"(python -m (?:benchmarks|studies)\.[\w.]+)(?!\S)", r"\1 --tiny", code)
    code = code.replace("studies.tables --tiny", "studies.tables")  # it reads files only
    return re.sub(r"/tmp/([\w.-]+)", lambda m: f"{tmp}/{m.group(1)}", code)


def training_commands() -> dict[str, str]:
    """{/tmp/NAME: the first command of the pages that trains it}."""
    commands = {}
    for _, language, code in BLOCKS:
        if language != "bash" or skip_reason(code):
            continue
        for line in code.splitlines():
            match = TRAIN.search(line)
            if match:
                commands.setdefault(match.group(4), line.split("#")[0].strip())
    return commands


TRAINED = training_commands()


def _environment() -> dict:
    bin_dir = os.path.dirname(sys.executable)
    return command_env(PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""), PYTHONPATH=str(ROOT))


def _run(language: str, code: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", code] if language == "python" else ["bash", "-e", "-o", "pipefail", "-c", code]
    return subprocess.run(argv, cwd=ROOT, env=_environment(), capture_output=True, text=True, check=False,
                          timeout=BLOCK_TIMEOUT)


@pytest.fixture(scope="session")
def docs_tmp(tmp_path_factory) -> str:
    """TMP: one folder for every worker of the session."""
    return str(shared_folder(tmp_path_factory, "docs_blocks"))


def ensure_trained(workdir: str, tmp: str) -> None:
    """Trains /tmp/NAME as the pages do (smoke form), once for all workers."""
    name = workdir[len("/tmp/"):]
    with locked(tmp, [name]):
        done = os.path.join(tmp, f".{name}.trained")
        if os.path.exists(done):
            return
        result = _run("bash", smoke_form(TRAINED[workdir], tmp))
        assert result.returncode == 0, f"training {workdir} failed:\n{result.stdout[-2000:]}{result.stderr[-3000:]}"
        Path(done).touch()


def commands(code: str) -> list[str]:
    """The commands of a bash block: continued lines joined, comments and blank lines left out."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def run_once(language: str, code: str, tmp: str) -> subprocess.CompletedProcess | None:
    """Runs `code` (smoke form) holding the locks of the workdirs it names, unless the same code
    (comments and spacing aside) already ran in this session: the pages repeat some commands
    (the quick start, a workdir's training), and each runs once. None where it had run."""
    key = " ".join(re.sub(r"(?m)\s+#[^\n\"']*$", "", code).split())
    digest = hashlib.sha256(f"{language}\n{key}".encode()).hexdigest()[:16]
    workdirs = [w[len("/tmp/"):] for w in set(re.findall(r"/tmp/[\w.-]+", code)) & set(TRAINED)]
    with locked(tmp, workdirs + [f"run-{digest}"]):
        done = os.path.join(tmp, f".run-{digest}.ok")
        if os.path.exists(done):
            return None
        result = _run(language, smoke_form(code, tmp))
        if result.returncode == 0:
            Path(done).touch()
        return result


def test_the_pages_have_code_blocks():
    languages = {language for _, language, _ in BLOCKS}
    assert languages == {"python", "bash"} and len(BLOCKS) > 20


def test_only_marked_blocks_are_skipped():
    for where, _, code in BLOCKS:
        reason = skip_reason(code)
        first = code.lstrip().splitlines()[0]
        if reason is None:
            assert not re.match(r"#\s*(needs|not run|skip)", first, re.I), f"{where}: unknown skip form {first!r}"
        else:
            assert SKIP_REASONS[reason].search(code), f"{where}: marked {reason!r} but shows no reason for it"


@pytest.mark.slow
@pytest.mark.parametrize("where, language, code", BLOCKS, ids=[where for where, _, _ in BLOCKS])
def test_code_block(where, language, code, docs_tmp):
    reason = skip_reason(code)
    if reason:
        pytest.skip(f"{where}: {code.lstrip().splitlines()[0]}")
    for workdir in sorted(set(re.findall(r"/tmp/[\w.-]+", code)) & set(TRAINED)):
        ensure_trained(workdir, docs_tmp)
    trained = {" ".join(smoke_form(command, docs_tmp).split()) for command in TRAINED.values()}
    for command in commands(code) if language == "bash" else [code]:
        if " ".join(smoke_form(command.split(" #")[0], docs_tmp).split()) in trained:
            continue  # ensure_trained ran it
        result = run_once(language, command, docs_tmp)
        if result is not None:
            assert result.returncode == 0, f"{where} failed:\n{command}\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
