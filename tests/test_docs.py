"""The README and the instructors' guide name only what exists.

In their code (fenced blocks and `inline code`): every `make <target>` is a rule of the
Makefile and every `VAR=` given to make is a variable it reads; every `python -m autograder
<command>` is a command of the CLI and each `--flag` after it one of that command's flags;
every `nbgrader <command>` is one of nbgrader's; every `python -m <module>` can be imported;
and every inline path (a span with a "/" or a file suffix) exists in the repository.
Placeholders (`<lesson>`, `NN_topic`) match any name; the folders a course creates as it
is taught (submitted/, release/, ...) need not exist.
"""

import contextlib
import fnmatch
import functools
import importlib.util
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.__main__ import main as autograder_main

REPO = Path(__file__).resolve().parent.parent
DOCS = ["README.md", "docs/instructors.md", "docs/architecture.md"]

# Folders and files that appear only while a course is taught (all gitignored) or that `make venv` creates.
MADE_AT_RUN_TIME = {"submitted", "autograded", "feedback", "release", "gradescope", "gradebook.db", "grades.csv", ".venv",
                    "timestamp.txt", "submission_secret.txt"}
NOT_THE_REPOSITORY = MADE_AT_RUN_TIME | {".git", "__pycache__", ".pytest_cache", ".ipynb_checkpoints"}
PATH_SUFFIXES = (".py", ".md", ".ipynb", ".yml", ".txt", ".pt", ".cfg", ".toml")
PLACEHOLDERS = [(re.compile(r"<[^<>/]+>"), "*"), (re.compile(r"\bNN_topic\b"), "*"), (re.compile(r"\bNN\b"), "[0-9][0-9]")]


def code_of(markdown):
    """(fenced blocks, inline spans) of a Markdown text."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.S | re.M)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", markdown, flags=re.S | re.M)
    inline = [span.replace("\\|", "|") for span in re.findall(r"`([^`\n]+)`", prose)]
    return fenced, inline


def commands(snippets, prefix):
    """The words after each command `prefix` in the snippets (shell comments left out), up to the end of the command."""
    found = []
    for snippet in snippets:
        snippet = re.sub(r"(^|\s)#[^\n]*", "", snippet)
        # Where a command starts: a line, or after `;`, `&&`, `|`, `(`, a backtick; a path before it (.venv/bin/) is fine.
        start = rf"(?:^|[;&|(`])[ \t]*(?:[\w.$/-]*/)?{re.escape(prefix)}(?=\s)([^\n]*)"
        for match in re.finditer(start, snippet, flags=re.M):
            rest = re.split(r"\s#|\||;|&&|`", match.group(1).replace("\\|", "|"))[0]
            found.append(rest.split())
    return found


def makefile():
    """{target: the variables its rule reads, directly or through other variables}."""
    lines = (REPO / "Makefile").read_text().splitlines()
    definitions = {}
    for line in lines:
        definition = re.match(r"^(?:export\s+)?([A-Za-z_]\w*)\s*[:?+]?=(.*)$", line)
        if definition:
            definitions[definition.group(1)] = definitions.get(definition.group(1), "") + definition.group(2)
    rules = {}
    for i, line in enumerate(lines):
        rule = re.match(r"^([A-Za-z][\w.-]*(?:[ \t]+[A-Za-z][\w.-]*)*)[ \t]*:(?!=)(.*)$", line)
        if rule:
            recipe = [rule.group(2)]
            for following in lines[i + 1:]:
                if not following.startswith("\t"):
                    break
                recipe.append(following)
            for target in rule.group(1).split():
                rules[target] = "\n".join(recipe)

    def reads(text, seen):
        for name in re.findall(r"\$[({]([A-Za-z_]\w*)[)}]", text):
            if name not in seen:
                seen.add(name)
                reads(definitions.get(name, ""), seen)
        return seen

    return {target: reads(recipe, set()) for target, recipe in rules.items()}


def make_problems(snippets):
    targets = makefile()
    problems = []
    for words in commands(snippets, "make"):
        named = [w for w in words if re.fullmatch(r"[A-Za-z][\w.-]*", w)]
        for target in named:
            if target not in targets:
                problems.append(f"make {target}: no such target in the Makefile (targets: {', '.join(sorted(targets))})")
        for word in words:
            variable = re.match(r"^([A-Za-z_]\w*)=", word)
            for target in named if variable else []:
                if target in targets and variable.group(1) not in targets[target]:
                    problems.append(f"make {' '.join(words)}: `make {target}` does not read {variable.group(1)}")
    return problems


def cli_help(args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        autograder_main([*args, "--help"])
    return out.getvalue()


def cli_problems(snippets):
    subcommands = set(re.search(r"\{([\w,-]+)\}", cli_help([])).group(1).split(","))
    problems = []
    for words in commands(snippets, "python -m autograder"):
        positional = [w for w in words if not w.startswith("-")]
        if not positional or positional[0].startswith(("<", "[")):
            continue
        named = positional[0].split("|")  # "grade|check|autograde" names three
        for name in named:
            if name not in subcommands:
                problems.append(f"python -m autograder {name}: no such command (commands: {', '.join(sorted(subcommands))})")
        for name in set(named) & subcommands:
            flags = set(re.findall(r"--[\w-]+", cli_help([name])))
            for flag in (w.split("=")[0] for w in words if w.startswith("--")):
                if flag not in flags:
                    problems.append(f"python -m autograder {name} {flag}: no such option (options: {', '.join(sorted(flags))})")
    return problems


def nbgrader_problems(snippets):
    from nbgrader.apps.nbgraderapp import NbGraderApp

    problems = []
    for words in commands(snippets, "nbgrader"):
        if words and re.fullmatch(r"[a-z_]+", words[0]) and words[0] not in NbGraderApp.subcommands:
            problems.append(f"nbgrader {words[0]}: nbgrader has no such command")
    return problems


@functools.lru_cache(maxsize=None)
def options_of(*command):
    """The --options that ``python -m <command>`` lists in its help, spelt without dashes or
    underscores (pytest lists --junit-xml and takes --junitxml too)."""
    flag = "--help-all" if command[0] == "nbgrader" else "--help"
    text = subprocess.run([sys.executable, "-m", *command, flag], cwd=REPO, capture_output=True, text=True,
                          timeout=120).stdout
    return {re.sub(r"[-_]", "", option) for option in re.findall(r"--([A-Za-z][\w-]*)", text)}


@functools.lru_cache(maxsize=None)
def configurable_traits():
    """{class name: its configurable traits} for nbgrader's classes (what --Class.trait=... may set)."""
    import nbgrader.apps  # noqa: F401 (imports every configurable class of nbgrader)
    from traitlets.config import Configurable

    found, todo = {}, [Configurable]
    while todo:
        cls = todo.pop()
        found.setdefault(cls.__name__, set()).update(cls.class_traits(config=True))
        todo += cls.__subclasses__()
    return found


def _nbgrader_command(words):
    """The (sub)command an nbgrader command line runs: `db student add` for the database's."""
    return tuple(words[:3]) if words[0] == "db" else (words[0],)


def flag_problems(snippets):
    """Every --option given to an nbgrader command, or to pytest with the course's plugin, is one it
    takes (nbgrader's --Class.trait=... included)."""
    from nbgrader.apps.nbgraderapp import NbGraderApp

    problems = []
    invocations = [("nbgrader", *_nbgrader_command(words), words) for words in commands(snippets, "nbgrader")
                   if words and words[0] in NbGraderApp.subcommands]
    invocations += [("pytest", "-p", "autograder.pytest_plugin", words)
                    for words in commands(snippets, "python -m pytest") if "autograder.pytest_plugin" in words]
    for *command, words in invocations:
        for option in {w.split("=")[0][2:] for w in words if w.startswith("--")}:
            if "." in option:
                cls, trait = option.split(".", 1)
                known = trait in configurable_traits().get(cls, ())
            else:
                known = re.sub(r"[-_]", "", option) in options_of(*command)
            if not known:
                problems.append(f"{' '.join(command)} --{option}: no such option")
    return problems


def module_problems(snippets):
    problems = []
    for snippet in snippets:
        for module in re.findall(r"python3? -m ([A-Za-z_][\w.]*)", snippet):
            try:
                found = importlib.util.find_spec(module) is not None
            except ModuleNotFoundError:
                found = False
            if not found:
                problems.append(f"python -m {module}: no such module")
    return problems


@functools.lru_cache(maxsize=None)
def repository_paths():
    """The repository's files and folders, relative to its root: what git tracks or would add, not what it ignores."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                                capture_output=True, text=True, check=True).stdout.splitlines()
        files = [name for name in listed if (REPO / name).exists()]
    except (OSError, subprocess.CalledProcessError):  # no git: every file but what runs and installs leave
        files = [path.relative_to(REPO).as_posix() for path in REPO.rglob("*")
                 if path.is_file() and not NOT_THE_REPOSITORY & set(path.relative_to(REPO).parts)]
    paths = set(files)
    for name in files:
        parts = name.split("/")
        paths.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return paths


def path_problems(spans):
    problems = []
    for span in spans:
        path = span.rstrip(".,:;")
        if not re.fullmatch(r"[\w.<>*-]+(/[\w.<>*-]*)*", path) or path.startswith("-"):
            continue  # code, a flag, or an absolute path: not a repository path
        if "/" not in path and not path.endswith(PATH_SUFFIXES):
            continue
        if path.split("/")[0] in MADE_AT_RUN_TIME:
            continue
        pattern = path.rstrip("/")
        for placeholder, wildcard in PLACEHOLDERS:
            pattern = placeholder.sub(wildcard, pattern)
        if "/" in pattern:
            found = any(fnmatch.fnmatchcase(name, pattern) for name in repository_paths())
        else:  # a bare file name: anywhere in the repository
            found = any(fnmatch.fnmatchcase(name.rsplit("/", 1)[-1], pattern) for name in repository_paths())
        if not found:
            problems.append(f"`{span}`: no such file or folder in the repository")
    return problems


def problems_in(markdown):
    fenced, inline = code_of(markdown)
    snippets = fenced + inline
    return (make_problems(snippets) + cli_problems(snippets) + nbgrader_problems(snippets)
            + flag_problems(snippets) + module_problems(snippets) + path_problems(inline))


@pytest.mark.parametrize("doc", DOCS)
def test_the_doc_names_only_what_exists(doc):
    problems = problems_in((REPO / doc).read_text(encoding="utf-8"))
    assert not problems, f"{doc}:\n  " + "\n  ".join(problems)


def test_the_readme_links_to_the_instructors_guide():
    assert "docs/instructors.md" in (REPO / "README.md").read_text(encoding="utf-8")


def test_each_check_finds_what_it_looks_for():
    planted = """
```bash
make nonsense                          # no such target
make autograde NOSUCHVAR=1             # no such variable
make autograde LESSON=01_self_attention  # a variable of make lab, not of make autograde
python -m autograder frobnicate x      # no such command
python -m autograder grade x.ipynb --nonsense
nbgrader formgrader                    # it is `nbgrader formgrade`, or JupyterLab's /formgrader
nbgrader collect 01 --studnet=ada --CourseDirectory.ignor='[]'   # misspelt options
python -m pytest -p autograder.pytest_plugin --notebooks submitted/
python -m autograder.nothere
```
Open `autograder/nothere.py` and `solutions/<lesson>/nothere.ipynb`.
"""
    found = "\n".join(problems_in(planted))
    for expected in ("make nonsense", "NOSUCHVAR", "`make autograde` does not read LESSON", "autograder frobnicate", "grade --nonsense",
                     "nbgrader formgrader", "autograder.nothere: no such module", "collect --studnet",
                     "collect --CourseDirectory.ignor", "pytest_plugin --notebooks",
                     "`autograder/nothere.py`", "`solutions/<lesson>/nothere.ipynb`"):
        assert expected in found, f"the check missed {expected!r}; it found:\n{found}"
    fine = """
`make test`, `make lab LESSON=lessons/01_self_attention/01_self_attention.ipynb`,
`python -m autograder grade submitted/<student>/<lesson>/<lesson>.ipynb --json`, `nbgrader export`,
`nbgrader collect 01 --student=ada --update --CourseDirectory.ignore='[]'`,
`python -m pytest -p autograder.pytest_plugin --notebook submitted/ --grade-timeout 90 --junitxml=x.xml -k a`,
`solutions/<lesson>/<lesson>.ipynb`, `autograder/checks/hidden/l<lesson>.py`, `release/<lesson>/`
"""
    assert problems_in(fine) == []


def test_the_package_points_only_at_documents_that_exist():
    """A comment or docstring of the shipped package that sends the reader to a document names one in the repository."""
    missing = []
    for module in sorted((REPO / "autograder").rglob("*.py")):
        for name in re.findall(r"[\w./-]*\b[A-Za-z_]\w*\.md\b", module.read_text(encoding="utf-8")):
            if "shared/" in name:
                continue  # the course's contract, kept beside the repository
            if not (REPO / name).exists() and not any(p.name == name for p in (REPO / "docs").glob("*.md")) \
                    and not (REPO / name.split("/")[-1]).exists():
                missing.append(f"{module.relative_to(REPO)}: {name}")
    assert not missing, "documents that do not exist:\n  " + "\n  ".join(missing)
