"""Write ``data/tinytext.txt``: a small English-like corpus for the char-level GPT.

Nothing is downloaded. A hand-written probabilistic grammar — names, nouns, verbs, places,
numbers, dialogue and sums — is sampled with a fixed seed until the text reaches about
200 KB. The text has structure a tiny model can find within a hundred steps (spelling,
spaces, punctuation) and more it can find later: subject-verb agreement ("the cat sees",
"the cats see"), "a" vs "an", plural nouns after numbers, one tense per paragraph,
pronouns that match a name, correct sums, and chapter numbers that count up.

Run from anywhere; it always writes the same bytes (Python's ``random.Random`` with a fixed
seed is stable across versions)::

    python data/make_tinytext.py            # -> data/tinytext.txt
    python data/make_tinytext.py --out /tmp/t.txt
"""

from __future__ import annotations

import argparse
import random
import sys
import textwrap
from pathlib import Path

try:
    from mgpukit.data import VOCAB
except ImportError:  # a checkout without `pip install -e .`: import from the repo itself
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from mgpukit.data import VOCAB

SEED = 1234
TARGET_CHARS = 200_000
DEFAULT_OUT = Path(__file__).resolve().parent / "tinytext.txt"

NAMES = {  # name -> pronoun
    "anna": "she", "ben": "he", "clara": "she", "dan": "he", "eva": "she", "finn": "he",
    "grace": "she", "hugo": "he", "ida": "she", "jack": "he", "kim": "she", "leo": "he",
    "mia": "she", "nora": "she", "omar": "he", "pia": "she", "ray": "he", "sara": "she",
    "tom": "he", "uma": "she", "will": "he", "zoe": "she",
}
NOUNS = [  # (singular, plural)
    ("cat", "cats"), ("dog", "dogs"), ("box", "boxes"), ("fox", "foxes"), ("bird", "birds"),
    ("tree", "trees"), ("house", "houses"), ("child", "children"), ("mouse", "mice"),
    ("apple", "apples"), ("boat", "boats"), ("book", "books"), ("key", "keys"), ("cup", "cups"),
    ("lamp", "lamps"), ("horse", "horses"), ("stone", "stones"), ("egg", "eggs"),
    ("owl", "owls"), ("baker", "bakers"), ("farmer", "farmers"), ("teacher", "teachers"),
    ("sheep", "sheep"), ("letter", "letters"), ("orange", "oranges"), ("window", "windows"),
]
ADJECTIVES = [
    "small", "big", "red", "old", "green", "quiet", "happy", "tired", "bright", "dark",
    "little", "brave", "cold", "warm", "yellow", "blue", "slow", "quick", "empty", "odd",
]
VERBS = [  # transitive: (base, third person singular, past)
    ("see", "sees", "saw"), ("find", "finds", "found"), ("carry", "carries", "carried"),
    ("like", "likes", "liked"), ("watch", "watches", "watched"), ("follow", "follows", "followed"),
    ("paint", "paints", "painted"), ("open", "opens", "opened"), ("hold", "holds", "held"),
    ("want", "wants", "wanted"), ("keep", "keeps", "kept"), ("take", "takes", "took"),
    ("make", "makes", "made"), ("wash", "washes", "washed"), ("count", "counts", "counted"),
]
INTRANSITIVE = [
    ("sleep", "sleeps", "slept"), ("run", "runs", "ran"), ("sing", "sings", "sang"),
    ("wait", "waits", "waited"), ("laugh", "laughs", "laughed"), ("walk", "walks", "walked"),
    ("jump", "jumps", "jumped"), ("rest", "rests", "rested"), ("hide", "hides", "hid"),
]
PLACES = [
    "in the garden", "by the river", "on the hill", "under the tree", "near the house",
    "at the market", "in the kitchen", "on the boat", "behind the barn", "in the forest",
]
TIMES = [
    "in the morning", "at night", "after lunch", "one day", "every evening", "at noon",
    "on monday", "on tuesday", "on friday", "on sunday", "before dinner", "later",
]
NUMBER_WORDS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve",
]
SAID = ["said", "asked", "called", "whispered", "answered"]


class Grammar:
    """The sampler: one ``random.Random`` and one method per phrase type."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def pick(self, items):
        return self.rng.choice(items)

    def article(self, word: str) -> str:
        return "an" if word[0] in "aeiou" else "a"

    def noun_phrase(self) -> tuple[str, bool]:
        """A subject or object; returns (text, is_plural)."""
        r = self.rng.random()
        if r < 0.25:
            return self.pick(list(NAMES)), False
        sing, plur = self.pick(NOUNS)
        plural = self.rng.random() < 0.4
        noun = plur if plural else sing
        adj = self.pick(ADJECTIVES) + " " if self.rng.random() < 0.5 else ""
        if r < 0.75:
            return f"the {adj}{noun}", plural
        if plural:
            n = self.rng.randint(2, 12)
            count = str(n) if self.rng.random() < 0.5 else NUMBER_WORDS[n]
            return f"{count} {adj}{noun}", True
        first = (adj or noun)
        return f"{self.article(first)} {adj}{noun}", False

    def verb(self, forms: tuple[str, str, str], plural: bool, past: bool) -> str:
        if past:
            return forms[2]
        return forms[0] if plural else forms[1]

    def clause(self, past: bool) -> str:
        subj, plural = self.noun_phrase()
        if self.rng.random() < 0.7:
            obj, _ = self.noun_phrase()
            text = f"{subj} {self.verb(self.pick(VERBS), plural, past)} {obj}"
        else:
            text = f"{subj} {self.verb(self.pick(INTRANSITIVE), plural, past)}"
        if self.rng.random() < 0.3:
            text += " " + self.pick(PLACES)
        return text

    def sentence(self, past: bool) -> str:
        r = self.rng.random()
        if r < 0.35:
            s = self.clause(past)
        elif r < 0.5:
            s = f"{self.pick(TIMES)}, {self.clause(past)}"
        elif r < 0.7:
            joiner = self.pick([", and ", ", but ", " because ", " while ", ", so "])
            s = self.clause(past) + joiner + self.clause(past)
        elif r < 0.8:
            s = self.there_is(past)
        else:
            s = self.clause(past) + ("!" if self.rng.random() < 0.3 else "")
        return s if s[-1] in "!?" else s + "."

    def there_is(self, past: bool) -> str:
        sing, plur = self.pick(NOUNS)
        n = self.rng.choice([1, 1, 2, 3, 4, 5, 6, 7])
        be = ("was" if n == 1 else "were") if past else ("is" if n == 1 else "are")
        thing = f"{self.article(sing)} {sing}" if n == 1 else f"{NUMBER_WORDS[n]} {plur}"
        return f"there {be} {thing} {self.pick(PLACES)}"

    def sum_line(self) -> str:
        a, b = self.rng.randint(0, 20), self.rng.randint(0, 20)
        op = self.pick(["plus", "minus", "times"])
        if op == "minus" and b > a:
            a, b = b, a
        value = {"plus": a + b, "minus": a - b, "times": a * b}[op]
        return f"{a} {op} {b} is {value}."

    def dialogue(self, name: str, other: str) -> str:
        sing, _ = self.pick(NOUNS)
        r = self.rng.random()
        if r < 0.4:
            return (
                f'"where is the {sing}?" asked {name}. '
                f'"it is {self.pick(PLACES)}," {self.pick(SAID[:1] + SAID[3:])} {other}.'
            )
        if r < 0.7:
            n = self.rng.randint(2, 9)
            _, plur = self.pick(NOUNS)
            return f'"i have {n} {plur}," {self.pick(SAID)} {name}. "i have {n + 1}!" said {other}.'
        line = self.sentence(past=False)
        return f'"{line[:-1]}," {self.pick(SAID)} {name}; "{self.sum_line()}"'

    def paragraph(self) -> str:
        """A short story: one tense, two characters, pronouns that match."""
        past = self.rng.random() < 0.6
        name, other = self.rng.sample(sorted(NAMES), 2)
        pron = NAMES[name]
        parts = [f"{self.pick(TIMES)}, {name} {self.verb(self.pick(VERBS), False, past)} "
                 f"{self.noun_phrase()[0]}."]
        for _ in range(self.rng.randint(2, 6)):
            r = self.rng.random()
            if r < 0.2:
                verb = self.verb(self.pick(INTRANSITIVE), False, past)
                parts.append(f"then {pron} {verb} {self.pick(PLACES)}.")
            elif r < 0.35:
                parts.append(self.dialogue(name, other))
            elif r < 0.45:
                parts.append(self.sum_line())
            else:
                parts.append(self.sentence(past))
        return textwrap.fill(" ".join(parts), width=72)


def generate(seed: int = SEED, target_chars: int = TARGET_CHARS) -> str:
    """The corpus text: numbered chapters of paragraphs, ending with the chapter that passes
    ``target_chars``. Paragraphs are separated by a blank line."""
    grammar = Grammar(seed)
    pieces: list[str] = []
    chapter = 0
    while sum(len(p) + 2 for p in pieces) < target_chars:
        chapter += 1
        pieces.append(f"chapter {chapter}")
        pieces.extend(grammar.paragraph() for _ in range(grammar.rng.randint(4, 9)))
    text = "\n\n".join(pieces) + "\n"
    unknown = sorted(set(text) - set(VOCAB))
    if unknown:  # an error here, not a silent drop when the data is loaded
        raise ValueError(f"the grammar produced characters {unknown!r} that are not in VOCAB")
    return text


def main(out_path: str | Path = DEFAULT_OUT) -> Path:
    """Generate the corpus and write it (ASCII, ``\\n`` line ends) to ``out_path``."""
    out_path = Path(out_path)
    out_path.write_bytes(generate().encode("ascii"))
    return out_path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT, help="where to write (default: %(default)s)")
    main(parser.parse_args().out)
