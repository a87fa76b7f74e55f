"""The secret rules: which text is a secret, by format, and what replaces it.

Each format has a documented shape (``docs/core/privacy.md`` lists them): a fixed prefix and alphabet for
the issued tokens (OpenAI, Anthropic, Stripe, GitHub, GitLab, Google, Slack, Hugging Face, npm, AWS key
ids), a structure for the others (JWTs, PEM and PGP private key blocks, credential URLs, bearer tokens),
and for secrets that have no shape of their own (passwords, AWS secret access keys, client secrets) the
name they are assigned to *and* a value that is a literal which looks like a secret. Code that only names
a secret (``apiKey = await getApiKey()``, ``secret: str``, ``os.environ["TOKEN"]``) is never changed: the
model has to read the code it edits.

Text is normalised before it is matched: zero-width characters are dropped and fullwidth forms read as
their ASCII letters, so a key written in fullwidth letters or with a zero-width space is still a key. A
string that holds a secret only in that normalised form comes back normalised, secret replaced. A
string that is base64 as a whole and decodes to text, and a JSON string whose escapes (``\\u0073k-…``)
hide a secret, are looked inside.

Every rule runs only when the text holds what each of its matches needs (a cheap substring test), and no
replacement can create what another rule looks for: placeholders hold none of the prefixes, no ``=`` or
``:`` and no ``://``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, Final

CREDENTIAL_PLACEHOLDER: Final = "[DS4 REDACTED CREDENTIAL]"
PRIVATE_KEY_PLACEHOLDER: Final = "[DS4 REDACTED PRIVATE KEY]"
TOKEN_PLACEHOLDER: Final = "[DS4 REDACTED TOKEN]"  # noqa: S105 (a placeholder, not a secret)
SECRET_PLACEHOLDER: Final = "[DS4 REDACTED SECRET]"  # noqa: S105 (a placeholder, not a secret)
_PLACEHOLDER_HEAD: Final = "[DS4 "

# Private key blocks: PEM (``RSA``, ``EC``, ``OPENSSH``, ``ENCRYPTED``, plain ``PRIVATE KEY``) and PGP's
# ``PRIVATE KEY BLOCK``. A block cut off before its END line is redacted to the end of the text.
# What follows the BEGIN line must open a key's body (base64, or a header such as ``Proc-Type:``), past
# line breaks written as such or as JSON escapes: code that builds a block (``BEGIN ...-----\n{body}``) or
# names its first line (``"-----BEGIN RSA PRIVATE KEY-----",``) holds no key.
_PRIVATE_KEY: Final = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?=(?:\s|\\[nr])*[A-Za-z0-9+/=]).*?"
    r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
# Issued tokens, each by prefix and alphabet; none may follow a letter or digit (so ``task-…`` or
# ``mask_live_…`` is not one). Each family runs only when the text holds its literal prefix; the look
# behind sits after the first character so the regex engine can skip ahead to it. The last item names the
# check a match must pass as well (see :func:`_issued`): what the format's own checksum or randomness
# gives, so a name that merely starts like a token (``ghs_ProcessHandler``) is left alone.
_TOKEN_FAMILIES: Final = (
    # Anthropic (sk-ant-api03-...) and OpenAI (sk-proj-..., sk-svcacct-..., legacy sk-...)
    (("sk-",), r"s(?<![A-Za-z0-9]s)k-(?:ant-[A-Za-z0-9_-]{8,}|[A-Za-z0-9_-]{16,})", ""),
    (("sk_live_", "sk_test_"), r"s(?<![A-Za-z0-9]s)k_(?:live|test)_[A-Za-z0-9]{10,}", "mixed"),  # Stripe
    (("rk_live_", "rk_test_"), r"r(?<![A-Za-z0-9]r)k_(?:live|test)_[A-Za-z0-9]{10,}", "mixed"),  # Stripe
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"g(?<![A-Za-z0-9]g)h[pousr]_[A-Za-z0-9]{20,}", "crc32"),
    (("github_pat_",), r"g(?<![A-Za-z0-9]g)ithub_pat_[A-Za-z0-9_]{22,}", "mixed"),  # GitHub fine-grained
    (("glpat-",), r"g(?<![A-Za-z0-9]g)lpat-[A-Za-z0-9_-]{20,}", ""),  # GitLab
    (("AKIA", "ASIA"), r"A(?<![A-Za-z0-9]A)(?:KIA|SIA)[0-9A-Z]{16}(?![0-9A-Z])", ""),  # AWS access key id
    (("AIza",), r"A(?<![A-Za-z0-9]A)Iza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])", "mixed"),  # Google API key
    (("xox",), r"x(?<![A-Za-z0-9]x)ox[abposr]-[0-9A-Za-z-]{10,}", "digit"),  # Slack
    (("hf_",), r"h(?<![A-Za-z0-9]h)f_[A-Za-z0-9]{30,}", "mixed"),  # Hugging Face
    (("npm_",), r"n(?<![A-Za-z0-9]n)pm_[A-Za-z0-9]{36}(?![A-Za-z0-9])", "crc32"),  # npm
    (("eyJ",), r"e(?<![A-Za-z0-9]e)yJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*", "jwt"),
)
_TOKENS: Final = tuple((gates, re.compile(pattern)) for gates, pattern, _check in _TOKEN_FAMILIES)
_TOKEN_CHECKS: Final = tuple(check for _gates, _pattern, check in _TOKEN_FAMILIES)
_TOKEN_GATES: Final = tuple(
    (gate, family) for family, (gates, _pattern, _check) in enumerate(_TOKEN_FAMILIES) for gate in gates
)
_ALL_FAMILIES: Final = frozenset(range(len(_TOKEN_FAMILIES)))
# The gate tests, one search each: a substring test for a family with one prefix, one regex for a family
# with several (the engine finds their shared head, "gh" or "sk_", and tells them apart after it).
_SINGLE_GATES: Final = tuple(
    (gates[0], family) for family, (gates, _pattern, _check) in enumerate(_TOKEN_FAMILIES) if len(gates) == 1
)
_SHARED_GATES: Final = tuple(
    (re.compile("|".join(map(re.escape, gates))), family)
    for family, (gates, _pattern, _check) in enumerate(_TOKEN_FAMILIES)
    if len(gates) > 1
)
# GitHub's and npm's tokens end in the CRC32 of the 30 random characters before it, 6 base62 digits.
_BASE62: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BASE62_VALUE: Final = {char: value for value, char in enumerate(_BASE62)}
_CHECKSUMMED_BODY: Final = 36


def _crc32_valid(body: str) -> bool:
    """Whether a GitHub or npm token's body (after ``ghp_``/``npm_``) carries its own CRC32 checksum."""
    if len(body) != _CHECKSUMMED_BODY:
        return False
    value = 0
    for char in body[30:]:
        value = value * 62 + _BASE62_VALUE.get(char, 0)
    return binascii.crc32(body[:30].encode("ascii", "replace")) == value


def _jwt_header(token: str) -> bool:
    """Whether a JWT's first part decodes to a JSON object naming its algorithm, as every JWT's does."""
    head = token.split(".", 1)[0]
    try:
        decoded = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        return False
    return isinstance(decoded, dict) and ("alg" in decoded or "enc" in decoded)


def _issued(check: str, token: str) -> bool:
    """Whether a match of an issued token's pattern passes its format's check.

    The body is what follows the prefix (``sk_live_``, ``github_pat_``, ``AIza``, ``hf_``, ``ghp_``).
    ``mixed``: a random body mixes at least two of lower case, upper case and digits (a name or a
    placeholder seldom does, a generated token almost always). ``crc32``: a valid checksum, or else a body
    that holds a digit (a name holds none; a real token without a digit still carries its checksum).
    ``digit``: Slack's tokens hold their team and user numbers. ``jwt``: the header is JSON with ``alg``.
    """
    if not check:
        return True
    if check == "jwt":
        return _jwt_header(token)
    if check == "digit":
        return _DIGIT.search(token) is not None
    prefix = _PREFIX.match(token)  # the pattern matches every string (its last choice is empty)
    body = token[prefix.end() :] if prefix is not None else token
    if check == "crc32":
        return _crc32_valid(body) or _DIGIT.search(body) is not None
    return _classes(_OTHER.sub("", body)) >= 2


_PREFIX: Final = re.compile(r"[a-z]+_(?:live_|test_|pat_)?|AIza|")


# scheme://user:password@ - only the password is replaced. Found from each "://".
_URL_AUTH: Final = re.compile(r"[^\s:/?#@\"'<>\[\]{}\\]{1,256}:([^\s/?#@\"'<>\\]{1,256})@")
_BEARER: Final = re.compile(
    r"(bearer)([ \t]+)(?!\[DS4 )([A-Za-z0-9._~+/=-]{8,})(?![A-Za-z0-9._~+/=-])", re.IGNORECASE | re.ASCII
)
_AUTHORIZATION: Final = re.compile(r"authorization[\"']?\s*[:=]\s*[\"']?\s*$", re.IGNORECASE | re.ASCII)
# name = value, name: value, name => value, "name": "value". Found from each "=" or ":": the name before
# it ends in a secret's word, the value after it is a quoted literal or one bare word, judged by what it
# looks like.
_SECRET_WORDS: Final = (
    r"api[_-]?key|secret[_-]?key|access[_-]?key|private[_-]?key|auth[_-]?key"  # noqa: S105 (names, not one)
    r"|secret|token|password|passwd|pwd|credentials?"
)
# The same words spelt out, lower case, for an ``endswith`` test.
_NAME_ENDINGS: Final = (
    *(
        f"{owner}{joint}key"
        for owner in ("api", "secret", "access", "private", "auth")
        for joint in ("", "_", "-")
    ),
    *("secret", "token", "password", "passwd", "pwd", "credential", "credentials"),
)
_NAME_REACH: Final = 12  # the longest of them
# A value: a literal in quotes, in JSON-escaped quotes (``\"...\"``, inside a JSON string), or a bare word.
_VALUE: Final = re.compile(
    r"[ \t]*(\\\"(?:[^\"\\\n]|\\[^\"])*\\\"|\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|`[^`\n]*`"
    r"|[^\s\"'`,;}\])\\]+)"
)
_NOT_ASSIGNING_BEFORE: Final = frozenset("=!<>:+-*/%&|^~")
_WORD_LAST_LETTERS: Final = frozenset("yntdslYNTDSL")
_SECRET_NAME: Final = re.compile(r"(?:^|[^A-Za-z])(?:" + _SECRET_WORDS + r")$", re.IGNORECASE | re.ASCII)
_CAMEL_SECRET_NAME: Final = re.compile(
    r"[a-z0-9](?:ApiKey|SecretKey|AccessKey|PrivateKey|AuthKey|Secret|Token|Password|Credentials?)$"
)
_KEY_WORDS: Final = ("key", "token", "secret", "password", "passwd", "pwd", "credential")

# Values that stand for a secret without being one.
_PLACEHOLDER_HINTS: Final = (
    *("$", "{", "}", "<", ">"),
    *("xxxx", "XXXX", "***", "...", "your", "YOUR", "Your"),
)
# Words documentation writes where a secret goes, in any case (``AKIAIOSFODNN7EXAMPLE``, ``changeme``).
# Each is long enough that a random token holds it by chance about once in a billion.
# Matched in a lower-cased copy: an inline ``(?i:...)`` group in the hints' pattern would cost every search
# the regex engine's skip to the hints' first characters (7 times slower on a token).
_PLACEHOLDER_WORD: Final = re.compile(r"example|change[-_]?me|placeholder|replace[-_]?me")
_PLACEHOLDER_HINT: Final = re.compile("|".join(map(re.escape, _PLACEHOLDER_HINTS)))
# A value made by counting or by holding one key (``0123456789abcdef``, ``aaaa...``) rather than drawn
# at random: at least _COUNTING_MIN letters and digits, a stretch of _COUNTING_RUN or more in which each
# character repeats the one before or follows it (``9`` then ``0``, or ``a`` as in hex), and stretches of
# 4 or more holding three quarters of them. A random token of 16 characters has such a stretch about once
# in 10^11 (each step repeats or follows with odds of 2 in 62).
_COUNTING_MIN: Final = 16
_COUNTING_RUN: Final = 8
_COUNTED_STRETCH: Final = 4
_IDENTIFIER_PATH: Final = re.compile(r"[A-Za-z_$][\w$]*(?:(?:\.|::|->)[A-Za-z_$][\w$]*)*[(\[]?", re.ASCII)
_ENV_NAME: Final = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")

# Zero-width characters (dropped) and the fullwidth ASCII block (read as ASCII).
_HIDDEN: Final = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff\uff01-\uff5e]")
_ZERO_WIDTH: Final = dict.fromkeys(
    [0x00AD, 0x180E, *range(0x200B, 0x2010), *range(0x202A, 0x202F), *range(0x2060, 0x2065), 0xFEFF]
)
_FULLWIDTH: Final = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)}
_NORMALISE: Final = {**_ZERO_WIDTH, **_FULLWIDTH}

_DIGIT: Final = re.compile(r"[0-9]")
_AWS_SECRET: Final = re.compile(r"[A-Za-z0-9+/]{40}")
_OTHER: Final = re.compile(r"[^A-Za-z0-9]")
_SPACE: Final = re.compile(r"\s")
_BASE64_WHOLE: Final = re.compile(r"[A-Za-z0-9+/_-]{20,}={0,2}", re.ASCII)
_BASE64_MIN: Final = 20
_JSON_BASE64_VALUE: Final = re.compile(r'"[A-Za-z0-9+/_-]{20,}={0,2}"')
_JSON_DEPTH: Final = 32
_JSON_MAX_CHARS: Final = 4_000_000  # a larger JSON text is matched as text only


def _classes(value: str) -> int:
    """How many of lower case, upper case, digits and other characters ``value`` holds."""
    return (
        (value != value.upper())
        + (value != value.lower())
        + (_DIGIT.search(value) is not None)
        + (_OTHER.search(value) is not None)
    )


def _placeholder(value: str) -> bool:
    if value.startswith((_PLACEHOLDER_HEAD, "%")):  # %s, %(name)s, %VAR%
        return True
    return _PLACEHOLDER_HINT.search(value) is not None or _PLACEHOLDER_WORD.search(value.lower()) is not None


def _counted(value: str) -> bool:
    """Whether ``value`` is made by counting or repeating (see :data:`_COUNTING_MIN`), not at random.

    Asked last, of a value a rule would otherwise replace: a few a payload, each a short loop.
    """
    chars = _OTHER.sub("", value)
    size = len(chars)
    if size < _COUNTING_MIN:
        return False
    covered = 0
    longest = run = 1
    previous = ord(chars[0])
    for char in chars[1:]:
        code = ord(char)
        step = code - previous
        if step in (0, 1) or (previous == 57 and code in (48, 65, 97)):  # "9" then "0", "A" or "a"
            run += 1
        else:
            if run >= _COUNTED_STRETCH:
                covered += run
            longest = max(longest, run)
            run = 1
        previous = code
    if run >= _COUNTED_STRETCH:
        covered += run
    longest = max(longest, run)
    return longest >= _COUNTING_RUN and covered * 4 >= size * 3


def looks_like_secret_literal(value: str) -> bool:
    """Whether a string literal assigned to a secret's name holds one (and is not a name for it).

    Not empty, no placeholder (``${…}``, ``<…>``, ``****``, ``your-key``), no whitespace (a prompt or a
    sentence), not an environment variable's name, URL, path or a name without digits (``api_key``,
    ``settings.SECRET``), at least 6 characters, and either 8 digits or more, or two
    kinds of character (letters of both cases, digits, symbols) or 20 characters or more.
    """
    if len(value) < 6 or len(value) > 4096 or _placeholder(value):
        return False
    if _SPACE.search(value) is not None:
        return False
    if _AWS_SECRET.fullmatch(value) is not None and _classes(value) >= 2:
        return not _counted(value)  # an AWS secret access key's shape, even where it starts like a path
    if _ENV_NAME.fullmatch(value) or "://" in value or value.startswith(("/", "./", "../", "~/")):
        return False
    if _IDENTIFIER_PATH.fullmatch(value) is not None and _DIGIT.search(value) is None:
        return False  # a name (api_key, getToken, settings.SECRET), not its value
    return (
        len(value) >= 20 or _classes(value) >= 2 or (value.isdigit() and len(value) >= 8)
    ) and not _counted(value)


def _looks_like_bare_secret(value: str) -> bool:
    """Whether an unquoted value (``PASSWORD=…`` in a shell, ``password: …`` in YAML) holds a secret.

    Code never does: an identifier, attribute path, call, subscript, type or keyword is a reference. A
    single word of letters and digits with no ``_`` (``hunter2``) is taken for a literal, as in a shell.
    """
    if len(value) < 6 or _placeholder(value):
        return False
    if _AWS_SECRET.fullmatch(value) is not None and _classes(value) >= 2:
        return not _counted(value)  # an AWS secret access key's shape, even where it starts like a path
    path = _IDENTIFIER_PATH.fullmatch(value)
    if path is not None:
        if "_" in value or not value.isalnum():
            return False
        # hunter2, or a long run of one case (a hex or base32 token); camelCase without digits is a name.
        found = (_classes(value) >= 2 and not value.isalpha()) or (
            len(value) >= 20 and (value.islower() or value.isupper())
        )
        return found and not _counted(value)
    if "://" in value or value.startswith(("/", "./", "../", "~/", "-")) or "(" in value or "[" in value:
        return False
    found = len(value) >= 20 or (len(value) >= 8 and _classes("".join(filter(str.isalnum, value))) >= 2)
    return found and not _counted(value)


def is_secret_name(name: str) -> bool:
    """Whether an object key or assigned name is a secret's (``password``, ``api_key``, ``clientSecret``)."""
    return _SECRET_NAME.search(name) is not None or _CAMEL_SECRET_NAME.search(name) is not None


def _assigned_value(value: str) -> str | None:
    """What replaces an assigned ``value`` (quotes kept), or None when it is no secret's literal."""
    if value.startswith('\\"'):
        if len(value) < 4 or not looks_like_secret_literal(value[2:-2]):
            return None
        return '\\"' + SECRET_PLACEHOLDER + '\\"'
    if value[0] in "\"'`":
        if len(value) < 2 or not looks_like_secret_literal(value[1:-1]):
            return None
        return value[0] + SECRET_PLACEHOLDER + value[-1]
    # A bare word may end a sentence or open a label ("KEY=Authorization: Bearer ..."): judged without it.
    return SECRET_PLACEHOLDER if _looks_like_bare_secret(value.rstrip(".:")) else None


def assignment_at(text: str, here: int, endpos: int) -> tuple[int, int, str] | None:
    """The secret value assigned by the "=" or ":" at ``here``, as ``(start, end, replacement)``, or None.

    The value is looked for up to ``endpos`` only (the end of the string it is in).
    """
    end = here
    while end and text[end - 1] in " \t":
        end -= 1
    if end and text[end - 1] in "\"'`":
        end -= 1
        if end and text[end - 1] == "\\":
            end -= 1
    # Every secret word ends in one of these letters: most signs are ruled out by one look.
    if not end or text[end - 1] not in _WORD_LAST_LETTERS:
        return None
    after = here + 1
    if here and text[here - 1] in _NOT_ASSIGNING_BEFORE:
        return None
    if text[here] == "=":
        if text.startswith(">", after):
            after += 1
        elif text.startswith(("=", "~"), after):
            return None
    elif text.startswith((":", "="), after):
        return None
    name = text[max(0, end - _NAME_REACH) : end]
    if not name.isascii():  # case is folded for ASCII only ("\u212a" is no "k"), as the screens fold it
        name = name.encode("ascii", "replace").decode("ascii")
    if not name.lower().endswith(_NAME_ENDINGS):
        return None
    value = _VALUE.match(text, after, endpos)
    if value is None:
        return None
    replacement = _assigned_value(value.group(1))
    return None if replacement is None else (value.start(1), value.end(1), replacement)


# What follows a "=" or ":" that assignment_at always refuses, so the screen does not ask it: nothing,
# a newline, an opener ("(", "[", "{", "$", "<", "%"), a quoted placeholder or word of up to 39 letters,
# a bare word of up to 19 letters, a call, subscript or attribute, a name holding "_" or "$", or a name
# of up to 5 characters. One C-level match, up to the end of the value's string.
_VALUE_END: Final = r"(?=[ \t\r\n,;)\]}\"'`\\]|\Z)"
_REFERENCE: Final = re.compile(
    r">?[ \t]*(?:\Z|[(\[{$<%\n\r]"
    r"|([\"'`])(?:[${<%]|[A-Za-z]{0,39}\1)"  # a quoted placeholder or word
    r"|\\\"(?:[${<%]|[A-Za-z]{0,39}\\\")"  # the same in JSON-escaped quotes
    r"|[A-Za-z]{1,19}"
    + _VALUE_END  # a word of letters
    + r"|[A-Za-z_][A-Za-z0-9_$]*(?:[(\[]|\.[A-Za-z0-9_$])"  # a call, subscript or attribute
    r"|(?=[A-Za-z0-9_$]*[_$])[A-Za-z_][A-Za-z0-9_$]*"
    + _VALUE_END  # a name with "_" or "$"
    + r"|[A-Za-z_][A-Za-z0-9_$]{0,4}"
    + _VALUE_END  # a short name
    + ")",
    re.ASCII,
)
# _REFERENCE on an ASCII copy of the text (``text.encode("ascii", "replace")``): it reads ASCII classes
# only (``re.ASCII``), where any other character and the "?" that stands for it in the copy are alike, so
# it matches the same; a third faster on bytes.
REFERENCE_BYTES: Final = re.compile(_REFERENCE.pattern.encode("ascii"))
# The same test turned round: an empty match where REFERENCE_BYTES finds none, and None where it finds one.
# The batch screen asks it after each of the ~1,050 signs that follow a secret's name, nine in ten of which
# are references: as a negative lookahead, those return None instead of a match object built for each.
NO_REFERENCE_BYTES: Final = re.compile(b"(?!" + REFERENCE_BYTES.pattern + b")")


# A secret's name before a sign, read in a folded reversed ASCII copy of the text (the sign comes first
# there, so the regex engine skips from one sign to the next in C): each sign that follows a secret's name
# (an optional quote and spaces between), as assignment_at reads it. The copy is folded by SCREEN_FOLD:
# lower case, ":" read as "=" and "-" as "_", so one pass finds both signs (and the batch screen in
# _scan.py finds the heads of "_" and "-" tokens in one pass too). The batch screen uses the same pattern
# on all strings joined.
SCREEN_FOLD: Final = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ:-", b"abcdefghijklmnopqrstuvwxyz=_")
# Every choice opens with its own literal, which the regex engine tests before it tries the choice.
REVERSED_NAME: Final = (
    rb"(?:yek_?(?:ipa|terces|ssecca|etavirp|htua)|nekot|terces|d(?:rowssap|wssap|wp)|slaitnederc|laitnederc)"
)
# Spaces, quotes and backslashes in any order, one character class: a looser reading than assignment_at's
# (spaces, then a quote, then a backslash), so it finds every sign that assignment_at may take, and each
# try costs the regex engine less (a third less time on the real coding payload than an optional group).
# Possessive: a name opens with a letter, so giving back a space or quote never helps (a tenth faster).
REVERSED_SIGN: Final = re.compile(rb"=[ \t\"'`\\]*+" + REVERSED_NAME)


def _assignments(text: str, gated: bool) -> list[tuple[int, int, str]]:
    """``(start, end, replacement)`` of every secret value assigned to a secret's name in ``text``.

    ``gated``: only the signs :data:`REVERSED_SIGN` finds after a secret's name are asked, and of those
    not the ones followed by what :data:`_REFERENCE` matches (:func:`assignment_at` refuses every other
    one). Ungated, every sign is asked (the reference the property tests hold the gated path to).
    """
    spans: list[tuple[int, int, str]] = []
    size = len(text)
    if gated:
        encoded = text.encode("ascii", "replace")  # the same positions
        backwards = encoded.translate(SCREEN_FOLD)[::-1]
        last = size - 1
        for match in REVERSED_SIGN.finditer(backwards):
            position = last - match.start()
            if NO_REFERENCE_BYTES.match(encoded, position + 1, size) is not None:
                span = assignment_at(text, position, size)
                if span is not None:
                    spans.append(span)
        return spans
    for sign in "=:":
        position = text.find(sign)
        while position >= 0:
            # The common case, a sign right after a character no secret word ends with, costs one look.
            span = assignment_at(text, position, size)
            if span is not None:
                spans.append(span)
            position = text.find(sign, position + 1)
    return spans


def credential_url_at(text: str, position: int, endpos: int) -> tuple[int, int, str] | None:
    """The password of a ``scheme://user:password@`` whose "://" is at ``position``, up to ``endpos``."""
    found = _URL_AUTH.match(text, position + 3, endpos)
    if found is None or not position or not text[position - 1].isalnum():
        return None
    password = found.group(1)
    if (
        _placeholder(password)
        or password.startswith(":")
        or _example_password(password)
        or _counted(password)
    ):
        return None
    return found.start(1), found.end(1), CREDENTIAL_PLACEHOLDER


# What documentation writes where a URL's password goes (``postgres://user:password@host``).
_EXAMPLE_PASSWORDS: Final = frozenset(
    ("password", "passwd", "pass", "pwd", "secret", "changeme", "example", "redacted", "hidden", "xxx")
)


def _example_password(password: str) -> bool:
    """Whether a URL's password is a stand-in: a word for one, or one or two characters (``app:pw@``)."""
    return len(password) < 3 or password.lower() in _EXAMPLE_PASSWORDS


def _credential_urls(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, replacement)`` of the password of every ``scheme://user:password@`` in ``text``."""
    spans: list[tuple[int, int, str]] = []
    position = text.find("://")
    size = len(text)
    while position >= 0:
        span = credential_url_at(text, position, size)
        if span is not None:
            spans.append(span)
        position = text.find("://", position + 3)
    return spans


def bearer_at(text: str, position: int, endpos: int) -> bool:
    """Whether the bearer rule replaces a token after the word "bearer" at ``position``, up to ``endpos``."""
    found = _BEARER.match(text, position, endpos)
    return found is not None and _bearer(found) != found.group(0)


def _bearers(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, replacement)`` of each token the bearer rule replaces, as ``_BEARER.sub`` finds them.

    Its matches are tried only where an ASCII lower-cased copy (the same positions; the rule reads ASCII
    case only) holds "bearer", left to right, each from where the last match ended: the regex engine's
    case-blind search would try every character of a long text.
    """
    lowered = text.encode("ascii", "replace").lower()
    spans: list[tuple[int, int, str]] = []
    done = 0  # where the last match ended: sub goes on from there
    position = lowered.find(b"bearer")
    while position >= 0:
        found = _BEARER.match(text, position) if position >= done else None
        if found is not None:
            done = found.end()
            if _bearer(found) != found.group(0):
                spans.append((found.start(3), found.end(3), TOKEN_PLACEHOLDER))
        position = lowered.find(b"bearer", position + 1)
    return spans


def _splice(text: str, spans: list[tuple[int, int, str]]) -> tuple[str, int]:
    """``text`` with each span replaced; a span inside one before it is left out."""
    if not spans:
        return text, 0
    spans.sort()
    parts: list[str] = []
    position = count = 0
    for start, end, replacement in spans:
        if start < position:
            continue
        parts.append(text[position:start])
        parts.append(replacement)
        position = end
        count += 1
    parts.append(text[position:])
    return "".join(parts), count


def _bearer(match: re.Match[str]) -> str:
    token = match.group(3)
    before = match.string[max(0, match.start() - 40) : match.start()]
    if _placeholder(token) or not (_classes(token) >= 2 or _AUTHORIZATION.search(before)) or _counted(token):
        return match.group(0)
    return f"{match.group(1)}{match.group(2)}{TOKEN_PLACEHOLDER}"


def _token_check(check: str) -> Any:
    """The replacement function of a token family: only matches that pass ``check`` are replaced."""

    def replace(match: re.Match[str]) -> str:
        body = match.group(0)
        if _placeholder(body) or not _issued(check, body) or _counted(body):
            return body
        return CREDENTIAL_PLACEHOLDER

    return replace


_TOKEN_REPLACE: Final = tuple(map(_token_check, _TOKEN_CHECKS))


def _token_heads() -> dict[str, tuple[int, ...]]:
    """The families a token starting with each three characters may belong to (every prefix has 3 or more)."""
    heads: dict[str, tuple[int, ...]] = {}
    for gate, family in _TOKEN_GATES:
        known = heads.get(gate[:3], ())
        if family not in known:
            heads[gate[:3]] = (*known, family)
    return heads


_TOKEN_HEADS: Final = _token_heads()


def token_at(text: str, position: int) -> bool:
    """Whether the token rule replaces a token starting at ``position`` of ``text`` (one whole string).

    Its family's pattern is matched there and its check asked, as the rule does: the batch screen's
    confirmation of a token's head, exact (a string's start reads as its start, not as a neighbour's end).
    """
    for family in _TOKEN_HEADS.get(text[position : position + 3], ()):
        found = _TOKENS[family][1].match(text, position)
        if found is not None and _TOKEN_REPLACE[family](found) != found.group(0):
            return True
    return False


def private_key_at(text: str, position: int) -> bool:
    """Whether the private key rule replaces a block whose ``-----BEGIN `` is at ``position`` of ``text``."""
    return _PRIVATE_KEY.match(text, position) is not None


def has_key_word(lowered: str) -> bool:
    """Whether lower-cased text holds a word the assignment rule's names end with."""
    return any(word in lowered for word in _KEY_WORDS)


def _changed(pattern: re.Pattern[str], replace: Any, text: str) -> tuple[str, int]:
    """``pattern.sub`` with ``replace``, counting only the matches it changed."""
    count = 0

    def one(match: re.Match[str]) -> str:
        nonlocal count
        result: str = replace(match)
        if result != match.group(0):
            count += 1
        return result

    return pattern.sub(one, text), count


def _plain_rules(text: str, gated: bool) -> tuple[str, int]:
    """Every rule on ``text`` as given; ``gated=False`` runs each without its substring test (for tests)."""
    total = 0
    if not gated or "-----BEGIN " in text:
        text, found = _PRIVATE_KEY.subn(PRIVATE_KEY_PLACEHOLDER, text)
        total += found
    if not gated or "://" in text:
        text, found = _splice(text, _credential_urls(text))
        total += found
    # Which families' prefixes the text holds, in one pass over the prefixes (a replacement never makes one).
    present = (
        {family for gate, family in _SINGLE_GATES if gate in text}
        | {family for gates, family in _SHARED_GATES if gates.search(text) is not None}
        if gated
        else _ALL_FAMILIES
    )
    if present:
        for family, ((_gates, pattern), replace) in enumerate(zip(_TOKENS, _TOKEN_REPLACE, strict=True)):
            if family in present:
                text, found = _changed(pattern, replace, text)
                total += found
    if not gated:
        text, found = _changed(_BEARER, _bearer, text)
        total += found
    elif "bearer" in text.lower():
        text, found = _splice(text, _bearers(text))
        total += found
    if not gated or (("=" in text or ":" in text) and has_key_word(text.lower())):
        text, found = _splice(text, _assignments(text, gated))
        total += found
    return text, total


def _decoded_base64(text: str) -> str | None:
    """The text a whole-string base64 value decodes to, or None when it is not one or not text."""
    padded = text + "=" * (-len(text) % 4)
    try:
        altchars = b"-_" if ("-" in text or "_" in text) else None
        raw = base64.b64decode(padded, altchars=altchars, validate=True)
        decoded = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    if not decoded:
        return None
    if decoded.isprintable():
        return decoded
    printable = sum(map(str.isprintable, decoded)) + sum(map(decoded.count, "\n\r\t"))
    return decoded if printable * 10 >= len(decoded) * 9 else None


# Base64 inside a longer text ("the key is c2stcHJvai0..."): every run of at least _BLOB_MIN characters of
# the standard alphabet (and its "=" padding) is decoded, and replaced whole when the text it decodes to
# holds a secret. Runs are found in an ASCII bytes copy mapped to two bytes, "a" for the alphabet and " "
# for the rest, so one ``bytes.find`` of _BLOB_MIN "a"s finds each run at C speed. 24 characters are 18
# bytes, shorter than any secret the rules find ("password=hunter2" is 16 bytes, but written as
# ``password = "hunter2"`` it is more).
_BASE64_ALPHABET: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_BLOB_TABLE: Final = bytes(97 if code in _BASE64_ALPHABET else 32 for code in range(256))
_BLOB_MIN: Final = 24
_BLOB_RUN: Final = b"a" * _BLOB_MIN


def base64_runs(raw: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` of every run of :data:`_BLOB_MIN` or more base64 characters (padding included)
    in ``raw``, an ASCII copy of a text (``text.encode("ascii", "replace")``: the same positions)."""
    mapped = raw.translate(_BLOB_TABLE)
    runs: list[tuple[int, int]] = []
    start = mapped.find(_BLOB_RUN)
    while start >= 0:
        end = mapped.find(b" ", start + _BLOB_MIN)
        if end < 0:
            end = len(mapped)
        runs.append((start, base64_padded_end(raw, end)))
        start = mapped.find(_BLOB_RUN, end)
    return runs


def base64_padded_end(raw: bytes, end: int) -> int:
    """Where a base64 run of ``raw`` that ends at ``end`` ends with its "=" padding (up to two)."""
    stop = end
    while stop < len(raw) and stop - end < 2 and raw[stop] == 61:
        stop += 1
    return stop


# The first characters whose value (32 to 47, 62, 63) makes the first byte decoded 0x80 to 0xBF (a
# continuation byte) or 0xF8 to 0xFF (never UTF-8): a quarter of the runs that are binary.
_NO_TEXT_FIRST: Final = frozenset(b"ghijklmnopqrstuv+/")


def base64_run_text(blob: bytes) -> bool:
    """Whether a base64 run (``blob``, as :func:`base64_runs` finds it) may decode to text: its bytes decode
    as :func:`_decoded_base64` decodes them, and are UTF-8. Asked first of every run, and answered without
    an exception for the common one that is binary (an image, a hash, a key's body)."""
    if blob and blob[0] in _NO_TEXT_FIRST:
        return False  # its first byte continues a character or is none: no UTF-8 starts so
    if (len(blob) - blob.count(b"=")) % 4 == 1:
        return False  # no base64 has that many characters
    try:
        decoded = binascii.a2b_base64(blob + b"=" * (-len(blob) % 4), strict_mode=True)
    except binascii.Error:
        return False
    if decoded.isascii():
        return True
    # A U+FFFD in the replaced decoding marks bytes that are no UTF-8, unless the text holds it itself.
    return "\ufffd" not in decoded.decode("utf-8", "replace") or b"\xef\xbf\xbd" in decoded


# A run of lower-case hex digits (a digest, a commit id: half the runs of a coding payload) never decodes to
# a secret: each character's value lies in 26-31 or 52-61, which leaves the bytes it decodes to unable to
# spell "-", "/", "A", "e", "E", "h", "p" or "P" in any alignment (written as themselves, in fullwidth forms,
# or around zero-width characters), and each rule's match needs one of them. core's
# test_privacy_perf_contract.py derives that from every group of four hex digits.
_HEX_RUN: Final = b"0123456789abcdef="


def base64_run_may_hide(blob: bytes) -> bool:
    """Whether a base64 run (as :func:`base64_runs` finds it) may decode to a secret: not hex digits
    alone, and text by :func:`base64_run_text`. Asked of every run before it is decoded as text."""
    return bool(blob.strip(_HEX_RUN)) and base64_run_text(blob)


def base64_blob_secret(blob: str) -> bool:
    """Whether a base64 run decodes to text in which the rules find a secret."""
    decoded = _decoded_base64(blob)
    return decoded is not None and _plain_rules(_normalised(decoded), True)[1] > 0


def _base64_blobs(text: str) -> tuple[str, int]:
    """``text`` with every base64 run that hides a secret replaced by the placeholder."""
    if len(text) < _BLOB_MIN:
        return text, 0
    encoded = text.encode("ascii", "replace")
    spans = [
        (start, end, SECRET_PLACEHOLDER)
        for start, end in base64_runs(encoded)
        if base64_run_may_hide(encoded[start:end]) and base64_blob_secret(text[start:end])
    ]
    return _splice(text, spans)


def _json_strings(value: Any, depth: int) -> tuple[Any, int]:
    """A decoded JSON value with every string (and every secret-named key's value) redacted."""
    if depth > _JSON_DEPTH:
        return value, 0
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        total = 0
        items = []
        for item in value:
            new, found = _json_strings(item, depth + 1)
            items.append(new)
            total += found
        return items, total
    if isinstance(value, dict):
        total = 0
        result = {}
        for key, item in value.items():
            new_key, found = redact_text(key)
            total += found
            if isinstance(item, str) and is_secret_name(key) and looks_like_secret_literal(item):
                result[new_key] = SECRET_PLACEHOLDER
                total += 1
                continue
            new, found = _json_strings(item, depth + 1)
            result[new_key] = new
            total += found
        return result, total
    return value, 0


# What _json_value gives for a text the rules do not read as JSON (``None`` is a JSON value).
_NOT_JSON: Final = object()


def _json_value(stripped: str) -> Any:
    """``stripped`` parsed, when the rules read it as a JSON text (:func:`is_json_text`, at most
    ``_JSON_MAX_CHARS``, and it parses); else :data:`_NOT_JSON`."""
    if not is_json_text(stripped) or len(stripped) > _JSON_MAX_CHARS:
        return _NOT_JSON
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _inside(text: str) -> tuple[str, int]:
    """What base64 or JSON escapes hide: the whole string replaced, or re-encoded; else unchanged."""
    stripped = text.strip()
    if len(stripped) >= _BASE64_MIN and _BASE64_WHOLE.fullmatch(stripped):
        decoded = _decoded_base64(stripped)
        if decoded is not None and _plain_rules(_normalised(decoded), True)[1]:
            return SECRET_PLACEHOLDER, 1
    decoded_json = _json_value(stripped)
    if decoded_json is not _NOT_JSON:
        redacted, found = _json_strings(decoded_json, 0)
        if found:
            # Written without escapes, a value deeper than the walk went is plain text now: matched.
            written, more = _plain_rules(json.dumps(redacted, ensure_ascii=False), True)
            return written, found + more
    return _escaped(text)


# A "\uXXXX" escape of a character that may be part of a secret (not a quote, backslash or control).
_UNICODE_ESCAPE: Final = re.compile(r"\\u([0-9A-Fa-f]{4})")


def _unescape(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char.isprintable() and char not in '"\\' else match.group(0)


def _escaped(text: str) -> tuple[str, int]:
    """Secrets spelt with ``\\u`` escapes outside a JSON text the walk decodes (broken JSON, JSON too deep
    or too large, prose): matched with the escapes read, and sent so, the secret replaced."""
    if "\\u" not in text:
        return text, 0
    plain = _normalised(_UNICODE_ESCAPE.sub(_unescape, text))
    if plain == text:
        return text, 0
    redacted, found = _plain_rules(plain, True)
    return (redacted, found) if found else (text, 0)


def json_inside(text: str) -> bool:
    """Whether the rules read ``text`` (stripped) as a JSON text: one that may hide a secret and parses.

    One that does not parse (a TOML lock file opens with ``[[``) is read for ``\\u`` escapes only.
    """
    return _json_value(text) is not _NOT_JSON


def is_json_text(text: str) -> bool:
    """Whether ``text`` (stripped) is JSON that may hide a secret: ``\\u`` escapes or a base64 string."""
    if not ((text.startswith("{") and text.endswith("}")) or (text.startswith("[") and text.endswith("]"))):
        return False
    return "\\u" in text or _JSON_BASE64_VALUE.search(text) is not None


def _normalised(text: str) -> str:
    if text.isascii() or _HIDDEN.search(text) is None:
        return text
    return text.translate(_NORMALISE)


def _redact(text: str, gated: bool) -> tuple[str, int]:
    normal = _normalised(text)
    redacted, total = _plain_rules(normal, gated)
    redacted, blobs = _base64_blobs(redacted)
    redacted, found = _inside(redacted)
    if not total + blobs + found:
        return text, 0
    return redacted, total + blobs + found


def redact_text(text: str) -> tuple[str, int]:
    """Replace every secret the rules find in ``text``; return the new text and how many were replaced."""
    return _redact(text, True)


def redact_text_ungated(text: str) -> tuple[str, int]:
    """:func:`redact_text` with every rule run whatever the text holds: the reference for the gates."""
    return _redact(text, False)
