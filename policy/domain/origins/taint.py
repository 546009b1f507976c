"""Matching values against content a run has read (issue 23 items 1 and 2): the text forms, the
stored index entry of one observation, and the in-memory index a step asks.

Text forms, each computed from the one before:

- ``normal``: Unicode NFKC, format and control characters dropped (a zero-width space hides
  nothing), every run of whitespace one space, trimmed. This is what an index entry stores: an
  erase (runs.privacy.erasure) still finds a user's value in it as they typed it;
- ``folded``: ``normal`` case-folded (then NFKC again: folding can undo it), so ``EVE@EVIL.COM``,
  the same address in full-width letters and ``eve@evil.com`` are one text;
- ``compact``: ``folded`` without its spaces, so ``DE89 3704 0044`` is ``de8937040044`` and a
  value respaced by a planner is the value it copied.

Matching rules (``ContentIndex.origins``), on the compact form ``c`` of an argument leaf:

1. ``len(c) < MIN_TOKEN`` (a digit, ``ok``): too little to tell a copy from a coincidence; no
   origin is found (a planner's citation may still add one: ``cited_origins``);
2. ``len(c) < MIN_CONTAIN``: the leaf is a whole leaf of the content, or one of its words
   (punctuation trimmed: ``OPS-9`` in ``see OPS-9.``, not in ``OPS-91``), or a run of letters
   and digits in one (``eve`` in ``?to=eve``); a short value of several words must occur with
   no letter or digit on either side;
3. ``len(c) < LONG``: ``c`` occurs anywhere in the compact content (an e-mail address, an IBAN
   written in groups, a URL inside a sentence);
4. longer (a body, a note): the leaf shares a passage with the content. The content is cut
   into ``CHUNK``-character pieces at fixed offsets, and every ``CHUNK``-character window of
   the leaf is looked up among them: any copied passage of ``2 * CHUNK - 1`` compact characters
   or more holds a whole piece, so it is found. Each word of the leaf of ``MIN_CONTAIN``
   characters or more is also looked up among the content's words (a URL or address pasted
   into a long text).

Cost: an entry is folded and cut once, when it is added; a query costs a few substring searches for
a short leaf and one set intersection for a long one, whatever the run's length. The index of a run
is bounded (``MAX_INDEX_CHARS``); past that the run fails closed (runs.domain.step.commits).
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

# The separator of leaves in an entry's text: a control character, so never part of a
# normalized leaf. A leaf equal to a value is ``SEP + value + SEP`` in it.
SEP = "\x1f"
MIN_TOKEN = 3
MIN_CONTAIN = 8
LONG = 64
CHUNK = 32
# What a run's index may hold, in ``normal`` characters (the untrusted content it read); the
# target workload (50 observations of 6 KB) is 300,000.
MAX_INDEX_CHARS = 1_000_000
# Characters trimmed from a word before it is looked up (``eve@evil.com.`` is the address).
_PUNCT = "\"'()[]{}<>.,;:!?*`\u201c\u201d\u2018\u2019\u00ab\u00bb"
_SPACES = re.compile(r"\s+")
# Control and format characters (Cc, Cf) but whitespace: dropped by ``normal``.
_INVISIBLE = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f\u00ad\u200b-\u200d\u2060-\u2064\ufeff]")


def normal(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = _INVISIBLE.sub("", text)
    if not text.isascii():
        # The rarer format characters (Cf) the pattern does not list: bidi marks, tags.
        text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    return _SPACES.sub(" ", text).strip()


def fold(normal_text: str) -> str:
    """The folded form of a ``normal`` text (see the module docstring)."""
    folded = normal_text.casefold()
    return folded if folded.isascii() else unicodedata.normalize("NFKC", folded)


def compact(folded_text: str) -> str:
    packed = folded_text.replace(" ", "")
    # A space can separate a letter from its combining mark (NFKC spells a spacing cedilla
    # as space + mark): joined again, they compose.
    return packed if packed.isascii() else unicodedata.normalize("NFKC", packed)


def leaves(value: Any, *, keys: bool = True) -> Iterator[str]:
    """The text of each scalar (and, with ``keys``, each key) of a JSON value, depth first.
    Booleans and null carry nothing to match (and would match everything)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield str(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            if keys:
                yield str(k)
            yield from leaves(v, keys=keys)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from leaves(v, keys=keys)


def entry_text(value: Any) -> str:
    """The stored text of a content: its leaves in ``normal`` form, each between separators."""
    parts = [n for n in (normal(leaf) for leaf in leaves(value)) if n]
    return SEP + SEP.join(parts) + SEP if parts else ""


@dataclass(frozen=True)
class Entry:
    """One observation's content as indexed: what the run stores (``runs.TaintEntry``)."""

    seq: int
    observation_id: str
    trust: str
    text: str


@dataclass
class ContentIndex:
    """The content of some observations, ready to be matched (module docstring, rules 1-4)."""

    # Each entry's compact and spaced (folded) forms, joined; the start of each entry's part
    # and its observation id, for ``_owner``.
    _compact: list[str] = field(default_factory=list)
    _spaced: list[str] = field(default_factory=list)
    _compact_starts: list[int] = field(default_factory=list)
    _spaced_starts: list[int] = field(default_factory=list)
    _ids: list[str] = field(default_factory=list)
    _chunks: dict[str, str] = field(default_factory=dict)
    # Each word (spaces apart, punctuation trimmed), each run of letters and digits in it, and
    # each whole leaf (compact) → the first observation that holds it.
    _words: dict[str, str] = field(default_factory=dict)
    _leaves: dict[str, str] = field(default_factory=dict)
    _joined: tuple[str, str] | None = None
    _compact_len: int = 0
    _spaced_len: int = 0

    def add(self, observation_id: str, text: str) -> None:
        spaced = fold(text)
        packed = compact(spaced)
        self._ids.append(observation_id)
        self._compact_starts.append(self._compact_len)
        self._spaced_starts.append(self._spaced_len)
        self._compact.append(packed)
        self._spaced.append(spaced)
        self._compact_len += len(packed)
        self._spaced_len += len(spaced)
        self._joined = None
        for i in range(0, len(packed) - CHUNK + 1, CHUNK):
            self._chunks.setdefault(packed[i : i + CHUNK], observation_id)
        for word in _tokens(spaced):
            self._words.setdefault(word, observation_id)
        for leaf in packed.split(SEP):
            if leaf:
                self._leaves.setdefault(leaf, observation_id)

    def __bool__(self) -> bool:
        return bool(self._ids)

    def _texts(self) -> tuple[str, str]:
        if self._joined is None:
            self._joined = ("".join(self._compact), "".join(self._spaced))
        return self._joined

    def _owner(self, starts: list[int], at: int) -> str:
        return self._ids[bisect.bisect_right(starts, at) - 1]

    def origins(self, spaced: str, packed: str, *, limit: int = 8) -> set[str]:
        """The observations ``spaced``/``packed`` (a leaf's folded and compact forms) derive
        from, at most ``limit`` of them."""
        if not self._ids or len(packed) < MIN_TOKEN:
            return set()
        compact_all, spaced_all = self._texts()
        if len(packed) >= LONG:
            return self._overlap(spaced, packed, limit)
        if len(packed) >= MIN_CONTAIN:
            return self._find(compact_all, packed, self._compact_starts, limit, bounded=False)
        if " " in spaced:
            # A short value of several words: a token-bounded search of the spaced text.
            return self._find(spaced_all, spaced, self._spaced_starts, limit, bounded=True)
        # One short word: a whole leaf or a word of the text (the first that holds it).
        return {o for o in (self._leaves.get(packed), self._words.get(packed)) if o is not None}

    def _find(
        self, text: str, needle: str, starts: list[int], limit: int, *, bounded: bool = False
    ) -> set[str]:
        found: set[str] = set()
        at = text.find(needle)
        while at >= 0 and len(found) < limit:
            end = at + len(needle)
            if not bounded or (
                (at == 0 or not text[at - 1].isalnum())
                and (end == len(text) or not text[end].isalnum())
            ):
                found.add(self._owner(starts, at))
            at = text.find(needle, at + 1)
        return found

    def _overlap(self, spaced: str, packed: str, limit: int) -> set[str]:
        windows = {packed[i : i + CHUNK] for i in range(len(packed) - CHUNK + 1)}
        found = {self._chunks[w] for w in windows & self._chunks.keys()}
        found |= {self._words[w] for w in set(_long_words(spaced)) & self._words.keys()}
        return set(sorted(found)[:limit])

    def shared(self, spaced: str, packed: str) -> set[str]:
        """The pieces and words a long leaf shares with the content (the provenance of a long
        leaf a first-party text also holds in part: ``provenance._not_vouched``)."""
        windows = {packed[i : i + CHUNK] for i in range(len(packed) - CHUNK + 1)}
        return (windows & self._chunks.keys()) | (set(_long_words(spaced)) & self._words.keys())

    def contains(self, observation_id: str, spaced: str, packed: str) -> bool:
        """Whether one observation's content holds the leaf as a whole leaf or a token, at any
        length (a citation's relaxed test: ``cited_origins``)."""
        if not packed or observation_id not in self._ids:
            return False
        i = self._ids.index(observation_id)
        if SEP + packed + SEP in self._compact[i]:
            return True
        text = self._spaced[i]
        at = text.find(spaced)
        while at >= 0:
            end = at + len(spaced)
            if (at == 0 or not text[at - 1].isalnum()) and (
                end == len(text) or not text[end].isalnum()
            ):
                return True
            at = text.find(spaced, at + 1)
        return False

    def holds(self, packed: str) -> bool:
        """Whether ``packed`` occurs in the compact text (first-party vouching)."""
        return bool(packed) and packed in self._texts()[0]


_ALNUM = re.compile(r"\w+")


def _tokens(spaced: str) -> Iterable[str]:
    """Each word of a text (punctuation trimmed) and each run of letters and digits in it, of
    ``MIN_TOKEN`` characters or more: ``SEC-1:`` gives ``sec-1`` and ``sec``."""
    for raw in spaced.replace(SEP, " ").split(" "):
        word = raw.strip(_PUNCT)
        if len(word) >= MIN_TOKEN:
            yield word
            for part in _ALNUM.findall(word):
                if MIN_TOKEN <= len(part) < len(word):
                    yield part


def _long_words(spaced: str) -> Iterable[str]:
    # The words of a long leaf worth looking up alone (an address, a URL pasted in a body).
    for raw in spaced.replace(SEP, " ").split(" "):
        word = raw.strip(_PUNCT)
        if len(word) >= MIN_CONTAIN:
            yield word


@dataclass
class RunIndex:
    """A run's index as a step asks it: its untrusted content and its trusted tool results
    (``Entry.trust``), up to entry ``last_seq``; ``last_key`` tells a cached copy from the
    index of another run that reused the id."""

    untrusted: ContentIndex = field(default_factory=ContentIndex)
    trusted: ContentIndex = field(default_factory=ContentIndex)
    last_seq: int = 0
    last_key: tuple[int, str, int] | None = None

    def extend(self, entries: Iterable[Entry]) -> None:
        for e in entries:
            if e.seq <= self.last_seq:
                continue
            target = self.untrusted if e.trust == UNTRUSTED else self.trusted
            target.add(e.observation_id, e.text)
            self.last_seq = e.seq
            self.last_key = (e.seq, e.observation_id, len(e.text))


UNTRUSTED = "untrusted-content"
TRUSTED = "trusted-tool"


def entry_seq(observation_seq: int, trust: str) -> int:
    """An entry's place in its run: an observation may give an untrusted entry (its untrusted
    parts) and a trusted one (the rest), in that order."""
    return 2 * observation_seq + (0 if trust == UNTRUSTED else 1)


def budget(used: int | None, text: str, trust: str) -> tuple[bool, int | None]:
    """Whether ``text`` is indexed, and the run's count after it (``RunState.taint_chars``).

    Untrusted content past ``MAX_INDEX_CHARS`` overflows the index: the count becomes None and
    the run fails closed from then on (None also marks a run from before the index). Trusted
    text is informational: it is indexed while the count stays under half the bound, and
    skipped (never an overflow) past it."""
    if used is None or not text:
        return False, used
    after = used + len(text)
    if trust == UNTRUSTED:
        return (True, after) if after <= MAX_INDEX_CHARS else (False, None)
    return (True, after) if after <= MAX_INDEX_CHARS // 2 else (False, used)
