"""Pronounceable invented names for TinyWorld, with deliberate near misses.

Names are built from consonant-vowel syllables ("Be" + "la" + "vo" → "Belavo"), so a word or
BPE tokenizer trained on TinyWorld text sees a bounded set of name words, and no name exists in
any real corpus a model might have memorised.

Distractors come from three kinds of sharing, all controlled by ``distractor_rate``:

- *near-miss twins*: one vowel changed ("Belavo Karin" vs "Belavo Karan"), so a sloppy copy of
  a name in a search query retrieves the wrong entity;
- *shared words*: people share first names (about three people per first name) and sometimes
  last names; companies share a root ("Torvani Systems" vs "Torvani Motors"); cities share a
  base ("Sanolo" vs "Port Sanolo"); film titles share words ("The Silent Harbor" vs
  "Silent River");
- *shared attributes* (same birthplace, same founding decade) come from the entity graph
  (:mod:`.entities`), not from here.

Every word handed out is registered in :class:`NameBank`, so two unrelated entities never
collide by accident (only the deliberate sharing above repeats a word).
"""

from __future__ import annotations

import random

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_CLUSTERS = ("br", "dr", "kr", "tr", "st", "sh")  # only word-initial, one word in five
_VOWELS = ("a", "e", "i", "o", "u")
_FINAL_CODAS = ("", "", "", "n", "r", "l", "s")
_COUNTRY_ENDINGS = ("ria", "land", "via", "nia", "stan")
_CITY_PREFIXES = ("Port", "New", "San", "Upper", "Fort", "Lake")
_CITY_SUFFIXES = ("Falls", "Bay", "Springs", "Hill")

# Film titles use a small English vocabulary so titles read as titles and share words.
FILM_ADJECTIVES = (
    "Silent",
    "Crimson",
    "Hidden",
    "Last",
    "Broken",
    "Golden",
    "Frozen",
    "Distant",
    "Quiet",
    "Wild",
    "Lost",
    "Burning",
    "Hollow",
    "Midnight",
    "Iron",
    "Velvet",
    "Bitter",
    "Silver",
    "Secret",
    "Endless",
    "Pale",
    "Northern",
    "Fading",
    "Restless",
    "Electric",
    "Lonely",
)
FILM_NOUNS = (
    "Harbor",
    "Garden",
    "River",
    "Summer",
    "Letter",
    "Mirror",
    "Kingdom",
    "Station",
    "Winter",
    "Road",
    "Voyage",
    "Promise",
    "Echo",
    "Horizon",
    "Lantern",
    "Orchard",
    "Island",
    "Tide",
    "Forest",
    "Bridge",
    "Crown",
    "Storm",
    "Signal",
    "Shadow",
    "Dream",
    "Circus",
    "Valley",
)

# English words used by the templates; an invented name must never equal one of them.
_RESERVED = {w.lower() for w in FILM_ADJECTIVES + FILM_NOUNS + _CITY_PREFIXES + _CITY_SUFFIXES} | {
    "the",
    "and",
    "or",
    "in",
    "of",
    "is",
    "it",
    "was",
    "born",
    "city",
    "film",
    "stars",
    "state",
    "bank",
    "base",
    "dune",
    "line",
    "lane",
    "time",
    "more",
    "note",
    "rose",
    "sale",
    "tale",
}


class NameBank:
    """Hands out unique invented words; remembers every word so nothing collides by chance."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set(_RESERVED)

    def _syllable(self, first: bool, final: bool) -> str:
        cluster = first and self.rng.random() < 0.2
        onset = self.rng.choice(_CLUSTERS if cluster else _ONSETS)
        coda = self.rng.choice(_FINAL_CODAS) if final else ""
        return onset + self.rng.choice(_VOWELS) + coda

    def fresh(self, min_syllables: int = 2, max_syllables: int = 3, ending: str = "") -> str:
        """A new capitalised word of 2-3 syllables (plus ``ending``) not used before; the
        longest length is drawn one time in four, so most names stay short."""
        for _ in range(10_000):
            n = max_syllables if self.rng.random() < 0.25 else min_syllables
            parts = [self._syllable(i == 0, i == n - 1 and not ending) for i in range(n)]
            word = ("".join(parts) + ending).capitalize()
            if word.lower() not in self.used:
                self.used.add(word.lower())
                return word
        raise RuntimeError("NameBank: ran out of fresh words; lower the entity counts")

    def near_miss(self, word: str) -> str | None:
        """``word`` with one vowel changed ("Karin" → "Karan"); None if every variant is taken."""
        positions = [i for i, ch in enumerate(word) if ch.lower() in _VOWELS]
        self.rng.shuffle(positions)
        for i in positions:
            vowels = [v for v in _VOWELS if v != word[i].lower()]
            self.rng.shuffle(vowels)
            for v in vowels:
                candidate = word[:i] + (v.upper() if i == 0 else v) + word[i + 1 :]
                if candidate.lower() not in self.used:
                    self.used.add(candidate.lower())
                    return candidate
        return None


def person_names(bank: NameBank, n: int, distractor_rate: float) -> list[tuple[str, str]]:
    """``n`` unique (first, last) pairs; about three people share each first name, a share
    ``distractor_rate / 2`` are near-miss twins of an earlier person (same first name, one
    vowel changed in the last name) and about one in ten shares a last name."""
    firsts = [bank.fresh(2, 3) for _ in range(max(3, round(n / 3)))]
    names: list[tuple[str, str]] = []
    taken: set[tuple[str, str]] = set()
    while len(names) < n:
        roll = bank.rng.random()
        if names and roll < distractor_rate / 2:
            first, last = bank.rng.choice(names)
            twin = bank.near_miss(last)
            if twin is None:
                continue
            pair = (first, twin)
        elif names and roll < distractor_rate / 2 + 0.1:
            pair = (bank.rng.choice(firsts), bank.rng.choice(names)[1])
        else:
            pair = (bank.rng.choice(firsts), bank.fresh(2, 3))
        if pair not in taken:
            taken.add(pair)
            names.append(pair)
    return names


def city_names(bank: NameBank, n: int, distractor_rate: float) -> list[str]:
    """Single words ("Sanolo") and, for about a third, two words ("Port Sanolo", "Miro Falls");
    a share ``distractor_rate / 2`` reuse the base word of an earlier city."""
    names: list[str] = []
    while len(names) < n:
        roll = bank.rng.random()
        singles = [c for c in names if " " not in c]
        if singles and roll < distractor_rate / 2:
            base = bank.rng.choice(singles)
        else:
            base = bank.fresh(2, 3)
        if base in names or bank.rng.random() < 0.3:
            if bank.rng.random() < 0.6:
                name = f"{bank.rng.choice(_CITY_PREFIXES)} {base}"
            else:
                name = f"{base} {bank.rng.choice(_CITY_SUFFIXES)}"
        else:
            name = base
        if name not in names:
            names.append(name)
    return names


def country_names(bank: NameBank, n: int) -> list[str]:
    """``n`` country names such as "Velaria" or "Dorland"."""
    return [bank.fresh(1, 2, ending=bank.rng.choice(_COUNTRY_ENDINGS)) for _ in range(n)]


def company_roots(bank: NameBank, n: int, distractor_rate: float) -> list[str]:
    """Company name roots; a share ``distractor_rate / 2`` repeat an earlier root, so two
    companies differ only by their industry word ("Torvani Systems" vs "Torvani Motors")."""
    roots: list[str] = []
    for _ in range(n):
        if roots and bank.rng.random() < distractor_rate / 2:
            roots.append(bank.rng.choice(roots))
        else:
            roots.append(bank.fresh(2, 3))
    return roots


def film_titles(bank: NameBank, n: int) -> list[str]:
    """``n`` unique multi-word titles ("The Silent Harbor", "Crimson Tide", "Echo of Marevo")."""
    titles: list[str] = []
    for _ in range(100 * n + 100):
        if len(titles) == n:
            return titles
        adjective = bank.rng.choice(FILM_ADJECTIVES)
        noun = bank.rng.choice(FILM_NOUNS)
        form = bank.rng.random()
        if form < 0.45:
            title = f"The {adjective} {noun}"
        elif form < 0.8:
            title = f"{adjective} {noun}"
        else:
            title = f"{noun} of {bank.fresh(2, 2)}"
        if title not in titles:
            titles.append(title)
    raise RuntimeError(f"film_titles: could not make {n} unique titles")
