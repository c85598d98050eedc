"""Read and write JSON exactly as fastjson 1.2.83 does for RocketMQ's config files (formats §1.1, §2).

fastjson writes map keys that are not strings without quotes (``{0:250,1:251}``) and bean keys as JSON
objects (``{{"brokerName":"b","queueId":0,"topic":"T"}:42}`` in a client's offsets.json), so a strict JSON
parser rejects the broker's own files. :func:`loads` accepts both; :func:`dumps` writes them back
byte-for-byte (pretty mode with TAB indentation), so corrected files can be dropped into a broker.
"""
from __future__ import annotations

import json
import re
from typing import Any

from jobs.problems import ConfigParseError, excerpt

__all__ = ["BigNumber", "ObjectKey", "loads", "dumps"]

MAX_DEPTH = 200  # nesting beyond this is no broker's file (and would exhaust the parser's stack)


class BigNumber(str):
    """An integer literal outside a Java long: kept as its text (Python would refuse to convert 5,000 digits, and
    no RocketMQ field can hold it)."""

    def __repr__(self) -> str:
        digits = len(self.lstrip("-"))
        return str(self) if digits <= 40 else f"{self[:12]}... ({digits} digits)"


def _integer(text: str) -> int | BigNumber:
    if len(text) < 19:  # 18 digits at most: always a long
        return int(text)
    digits = len(text.lstrip("-"))
    if digits > 19:
        return BigNumber(text)
    v = int(text)
    return v if -(1 << 63) <= v < (1 << 63) else BigNumber(text)


class ObjectKey(tuple):  # type: ignore[type-arg]
    """A JSON object used as a map key (a MessageQueue), as a hashable tuple of (name, value) pairs in order."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self)

    @classmethod
    def of(cls, **fields: Any) -> "ObjectKey":
        """Build a key with its fields in alphabetical order, as fastjson serialises a bean."""
        return cls(sorted(fields.items()))


_WS = re.compile(r"[ \t\r\n]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)((?:\.\d+)?(?:[eE][+-]?\d+)?)")  # group 1: a float's fraction, exponent
_BARE = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_RUN = {'"': re.compile(r'[^"\\]*'), "'": re.compile(r"[^'\\]*")}  # a string's characters up to a quote or escape
# A map entry of the usual shape in one match: a plain string or integer key, then a plain string, integer, true,
# false or null value and the ',' or '}' after it. A broker's files are hundreds of thousands of such entries, and a
# match each instead of a method call per token is what keeps a 100,000-queue consumerOffset.json well under a
# second. Each pattern only matches what the general path reads the same way; anything else (an escape, a float, an
# error) goes the general way from the same place.
_KEY = r'[ \t\r\n]*(?:"([^"\\]*)"|(-?(?:0|[1-9][0-9]*)))[ \t\r\n]*:[ \t\r\n]*'
_VALUE = r'(?:"([^"\\]*)"|(-?(?:0|[1-9][0-9]*))|(true|false|null))[ \t\r\n]*([,}])'
_ENTRY = re.compile(_KEY + _VALUE)
_PLAIN_KEY = re.compile(_KEY)
_PLAIN_VALUE = re.compile(_VALUE)
_COLON = re.compile(r"[ \t\r\n]*:[ \t\r\n]*")
_NEXT = re.compile(r"[ \t\r\n]*([,}])")
_WORDS = {"true": True, "false": False, "null": None}


def _plain(string: str | None, integer: str | None, word: str | None) -> Any:
    """The value of an entry that :data:`_ENTRY` or :data:`_PLAIN_VALUE` matched (one of the three is set)."""
    if string is not None:
        return string
    return _integer(integer) if integer is not None else _WORDS[word]  # type: ignore[index]


class _Parser:
    def __init__(self, text: str, source_path: str) -> None:
        self.s = text
        self.i = 0
        self.path = source_path
        self.depth = 0

    def fail(self, reason: str, at: int | None = None) -> ConfigParseError:
        return ConfigParseError(self.path, self.i if at is None else at, reason)

    def ws(self) -> None:
        self.i = _WS.match(self.s, self.i).end()  # type: ignore[union-attr]

    def peek(self) -> str:
        if self.i >= len(self.s):
            raise self.fail("unexpected end of input (file truncated?)")
        return self.s[self.i]

    def value(self) -> Any:
        self.ws()
        c = self.peek()
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c in "\"'":
            return self.string()
        m = _NUMBER.match(self.s, self.i)
        if m:
            self.i = m.end()
            return float(m.group()) if m.group(1) else _integer(m.group())
        m = _BARE.match(self.s, self.i)
        if m:
            word = m.group()
            self.i = m.end()
            if word == "true":
                return True
            if word == "false":
                return False
            if word == "null":
                return None
            raise self.fail(f"unexpected word ({excerpt(word)})", m.start())
        raise self.fail(f"unexpected character ({excerpt(c)})")

    def string(self) -> str:
        quote = self.s[self.i]
        start = self.i
        j = self.i + 1
        out = []
        run = _RUN[quote]
        while True:
            k = run.match(self.s, j).end()  # type: ignore[union-attr]
            if k >= len(self.s):
                raise self.fail("unterminated string (file truncated?)", start)
            out.append(self.s[j:k])
            if self.s[k] == quote:
                self.i = k + 1
                return "".join(out)
            esc = self.s[k + 1: k + 2]
            if esc == "u":
                hexs = self.s[k + 2: k + 6]
                if len(hexs) < 4:
                    raise self.fail("truncated \\u escape", k)
                if not _HEX4.fullmatch(hexs):  # int(..., 16) would take " 1a2", "+1a2" and "1_a2" (fastjson does not)
                    raise self.fail(f"invalid \\u escape ({excerpt(self.s[k:k + 6])})", k)
                out.append(chr(int(hexs, 16)))
                j = k + 6
            else:
                out.append({"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}.get(esc, esc))
                j = k + 2

    def key(self) -> Any:
        self.ws()
        c = self.peek()
        if c in "\"'":
            return self.string()
        if c == "{":
            at = self.i
            fields = self.obj()
            for v in fields.values():
                if isinstance(v, (dict, list)):  # no bean a key can be (a MessageQueue)
                    raise self.fail("an object used as a key holds an object or an array", at)
            return ObjectKey(fields.items())
        m = _NUMBER.match(self.s, self.i)
        if m:
            self.i = m.end()
            return _integer(m.group()) if m.group().lstrip("-").isdigit() else float(m.group())
        m = _BARE.match(self.s, self.i)
        if m:
            self.i = m.end()
            return m.group()
        raise self.fail(f"expected a key, found {excerpt(c)}")

    def key_and_colon(self) -> Any:
        m = _PLAIN_KEY.match(self.s, self.i)
        if m is not None:
            self.i = m.end()
            return m[1] if m[1] is not None else _integer(m[2])
        k = self.key()
        m = _COLON.match(self.s, self.i)
        if m is None:
            self.ws()
            self.peek()
            raise self.fail("expected ':' after a key")
        self.i = m.end()
        return k

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"nesting deeper than {MAX_DEPTH} levels")

    def obj(self) -> dict[Any, Any]:
        self.nest()
        self.i += 1
        out: dict[Any, Any] = {}
        self.ws()
        if self.peek() == "}":
            self.i += 1
            self.depth -= 1
            return out
        s = self.s
        while True:
            m = _ENTRY.match(s, self.i)
            if m is not None:
                out[m[1] if m[1] is not None else _integer(m[2])] = _plain(m[3], m[4], m[5])
                end = m[6]
            else:
                k = self.key_and_colon()
                m = _PLAIN_VALUE.match(s, self.i)
                if m is not None:
                    out[k] = _plain(m[1], m[2], m[3])
                    end = m[4]
                else:
                    out[k] = self.value()
                    m = _NEXT.match(s, self.i)
                    if m is None:
                        self.ws()
                        raise self.fail(f"expected ',' or '}}', found {excerpt(self.peek())}")
                    end = m[1]
            self.i = m.end()
            if end == "}":
                self.depth -= 1
                return out

    def arr(self) -> list[Any]:
        self.nest()
        self.i += 1
        out: list[Any] = []
        self.ws()
        if self.peek() == "]":
            self.i += 1
            self.depth -= 1
            return out
        while True:
            out.append(self.value())
            self.ws()
            c = self.peek()
            if c == ",":
                self.i += 1
                continue
            if c != "]":
                raise self.fail(f"expected ',' or ']', found {excerpt(c)}")
            self.i += 1
            self.depth -= 1
            return out


class _NotStrict(Exception):
    pass


def _constant(name: str) -> Any:
    raise _NotStrict(name)  # NaN, Infinity: not JSON, and not fastjson's


def _deeper_than(v: Any, limit: int) -> bool:
    """Whether ``v`` nests objects and arrays more than ``limit`` levels deep (the parser's MAX_DEPTH rule)."""
    level = [v] if isinstance(v, (dict, list)) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        level = [c for x in level for c in (x.values() if isinstance(x, dict) else x) if isinstance(c, (dict, list))]
    return False


def _strict(text: str) -> Any:
    """``text`` read by the C JSON parser when it is strict JSON the lenient parser reads the same way (a broker's
    topics.json and subscriptionGroup.json: 20-40x faster); raises _NotStrict for anything else.

    Strict JSON has only string keys, escapes and numbers the lenient parser reads alike (integers through
    :func:`_integer`, a repeated key keeps its first place and its last value in both). Left to the lenient parser:
    ``\\u`` escapes (it keeps a surrogate pair as two characters), control characters in strings, NaN/Infinity,
    a byte order mark, and nesting deeper than MAX_DEPTH (its error names the position)."""
    if "\\u" in text:
        raise _NotStrict("\\u")
    try:
        v = json.loads(text, parse_int=_integer, parse_constant=_constant)
    except (ValueError, RecursionError) as e:
        raise _NotStrict(str(e)) from None
    if _deeper_than(v, MAX_DEPTH):
        raise _NotStrict("deep")
    return v


def loads(text: str, *, source_path: str = "<string>") -> Any:
    """Parse fastjson output leniently (bare integer keys, object keys, TAB indentation).

    Raises:
        ConfigParseError: with the character position, when the text is empty, truncated or invalid.
    """
    try:
        return _strict(text)
    except _NotStrict:
        pass
    p = _Parser(text, source_path)
    p.ws()
    if p.i >= len(text):
        raise ConfigParseError(source_path, 0, "empty file")
    v = p.value()
    p.ws()
    if p.i != len(text):
        raise p.fail("trailing characters after the JSON value")
    return v


def _scalar(v: Any) -> str:
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    return str(v)


def _key(k: Any, depth: int) -> str:
    if isinstance(k, ObjectKey):
        return _dump(dict(k), depth)
    if isinstance(k, str):
        return json.dumps(k, ensure_ascii=False)
    return str(k)


def _dump(v: Any, depth: int) -> str:
    """fastjson's pretty printer: TAB indent; a map with a non-string key has no line breaks between entries."""
    if isinstance(v, dict):
        if not v:
            return "{}"
        ind = "\t" * (depth + 1)
        if all(isinstance(k, str) for k in v):
            items = [f"\n{ind}{_key(k, depth + 1)}:{_dump(x, depth + 1)}" for k, x in v.items()]
            return "{" + ",".join(items) + "\n" + "\t" * depth + "}"
        items = [f"{_key(k, depth + 1)}:{_dump(x, depth + 1)}" for k, x in v.items()]
        return "{" + ",".join(items) + "\n" + "\t" * depth + "}"
    if isinstance(v, (list, tuple)) and not isinstance(v, ObjectKey):
        if not v:
            return "[]"
        ind = "\t" * (depth + 1)
        return "[" + ",".join(f"\n{ind}{_dump(x, depth + 1)}" for x in v) + "\n" + "\t" * depth + "]"
    return _scalar(v)


def dumps(obj: Any, *, pretty: bool = True) -> str:
    """Write ``obj`` as fastjson 1.2.83 does (``JSON.toJSONString(obj, pretty)``); dict order is kept."""
    if pretty:
        return _dump(obj, 0)

    def compact(v: Any) -> str:
        if isinstance(v, dict):
            return "{" + ",".join(f"{compact(dict(k)) if isinstance(k, ObjectKey) else _key(k, 0)}:{compact(x)}"
                                  for k, x in v.items()) + "}"
        if isinstance(v, (list, tuple)) and not isinstance(v, ObjectKey):
            return "[" + ",".join(compact(x) for x in v) + "]"
        return _scalar(v)

    return compact(obj)
