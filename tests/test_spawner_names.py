"""Container names (``lab/names.py``): what an admin sees in ``docker ps`` and what a restarted
hub looks containers up by. Each must be a DNS label (the container's hostname), deterministic,
and never shared by two (user, server) pairs, whatever names users choose."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyterhub_gpulab.lab.names import MAX_LENGTH, check_prefix, container_name, escape_part

PREFIX = "jupyter"
DNS_LABEL = re.compile(r"^[a-z]([a-z0-9-]*[a-z0-9])?$")
HASHED = re.compile(r"--h--[0-9a-f]{12}$")
ESCAPE = re.compile(r"-([0-9a-f]{2})|([a-z0-9])")


def name(user: str, server: str = "") -> str:
    return container_name(PREFIX, user, server)


def assert_dns_safe(n: str) -> None:
    assert DNS_LABEL.match(n), f"{n!r} is not a DNS label"
    assert len(n) <= MAX_LENGTH, f"{n!r} is {len(n)} characters"


def _unescape(part: str) -> str:
    """The text ``escape_part`` made ``part`` from; ``ValueError`` if it made no text so."""
    out, pos = bytearray(), 0
    while pos < len(part):
        m = ESCAPE.match(part, pos)
        if not m:
            raise ValueError(f"{part!r} is not an escaped part at {pos}")
        out += bytes.fromhex(m[1]) if m[1] else m[2].encode()
        pos = m.end()
    text = out.decode("utf-8")  # UnicodeDecodeError is a ValueError
    if escape_part(text) != part:
        raise ValueError(f"{part!r} is not how {text!r} is escaped")
    return text


def unhashed_preimage(n: str) -> tuple[str, str] | None:
    """The (user, server) whose name is ``n`` without cutting and hashing, or ``None``: the split
    the module docstring promises (the first ``--`` after the escaped user is the separator)."""
    rest = n.removeprefix(PREFIX + "-")
    if rest == n:
        return None
    user_part, sep, server_part = rest.partition("--")
    if sep and not server_part:
        return None
    try:
        pair = (_unescape(user_part), _unescape(server_part))
    except ValueError:
        return None
    return pair if name(*pair) == n else None


# -- examples an admin would recognise ---------------------------------------------------------

DISTINCT = [
    pytest.param(("alice.smith", ""), ("alice-smith", ""), id="dot-vs-dash"),
    pytest.param(("alice@uni.edu", ""), ("alice-40uni.edu", ""), id="at-sign-vs-its-escape"),
    pytest.param(("Alice", ""), ("alice", ""), id="uppercase-vs-lowercase"),
    pytest.param(("jürgen", ""), ("jurgen", ""), id="umlaut-vs-ascii"),
    pytest.param(("用户", ""), ("", "用户"), id="cjk-user-vs-cjk-server"),
    pytest.param(("_alice", ""), ("alice", ""), id="leading-underscore"),
    pytest.param(("a", "b--c"), ("a--b", "c"), id="separator-inside-server-vs-user"),
    pytest.param(("a-", ""), ("a", "-"), id="trailing-dash-vs-dash-server"),
    pytest.param(("a", ""), ("a", "-"), id="default-vs-dash-server"),
    pytest.param(("a", "b"), ("a-b", ""), id="server-vs-dash-in-user"),
    pytest.param(("x" * 300, ""), ("x" * 299 + "y", ""), id="long-users-differing-at-the-end"),
    pytest.param(("x" * 300, "lab"), ("x" * 300, "lab2"), id="long-user-two-servers"),
    pytest.param(("x" * 60 + "\0b", ""), ("x" * 60, "b\0"), id="nul-moved-across-the-separator"),
]


@pytest.mark.parametrize(("one", "other"), DISTINCT)
def test_two_pairs_never_share_a_name_and_each_is_dns_safe(one, other):
    a, b = name(*one), name(*other)
    assert a != b
    assert_dns_safe(a)
    assert_dns_safe(b)


@pytest.mark.parametrize(
    ("user", "server", "expected"),
    [
        pytest.param("alice", "", "jupyter-alice", id="plain-user"),
        pytest.param("alice", "lab", "jupyter-alice--lab", id="named-server"),
        pytest.param("alice.smith", "", "jupyter-alice-2esmith", id="dot"),
        pytest.param("bob@uni.edu", "", "jupyter-bob-40uni-2eedu", id="at-sign"),
        pytest.param("Alice", "", "jupyter--41lice", id="uppercase"),
        pytest.param("jürgen", "", "jupyter-j-c3-bcrgen", id="umlaut-utf8-bytes"),
        pytest.param("_x", "", "jupyter--5fx", id="leading-underscore"),
        pytest.param("a-b", "my-lab", "jupyter-a-2db--my-2dlab", id="dashes-escaped"),
    ],
)
def test_short_names_are_readable_and_deterministic(user, server, expected):
    assert name(user, server) == expected
    assert name(user, server) == name(user, server)
    assert unhashed_preimage(expected) == (user, server)


@pytest.mark.parametrize(
    "user", [pytest.param("用户", id="cjk"), pytest.param("jürgen", id="umlaut")]
)
def test_unicode_names_are_plain_ascii(user):
    n = name(user, "实验")
    assert n.isascii()
    assert_dns_safe(n)


def test_long_names_are_cut_to_63_with_a_hash_of_the_whole_pair():
    long_user = "x" * 300
    n = name(long_user, "lab")
    assert_dns_safe(n)
    assert len(n) <= MAX_LENGTH
    assert HASHED.search(n)
    assert n.startswith("jupyter-xxxx")
    assert name(long_user, "lab") == n, "the same pair always gets the same name"
    # two pairs whose names differ only after the cut still get different names
    assert name(long_user, "lab2") != n
    assert name("x" * 299 + "y", "lab") != n


def test_a_user_cannot_choose_their_name_to_take_a_long_pairs_name():
    """An attacker knows a long pair's container name ``n`` and looks for a (user, server) whose
    name, uncut, is exactly ``n``. There is none: ``n`` ends in ``--h--<12 hex>``; escaped parts
    never contain ``--`` and every ``-`` in them starts ``-<2 hex>``, so no name that fits holds
    ``--h--``."""
    for victim in [("x" * 300, ""), ("x" * 300, "lab"), ("_" * 40, "_" * 40), ("Jürgen" * 20, "")]:
        n = name(*victim)
        assert HASHED.search(n)
        assert n.count("--") >= 2
        # try every split of n into "jupyter-<user part>[--<server part>]"
        assert unhashed_preimage(n) is None
        rest = n.removeprefix(PREFIX + "-")
        for cut in range(len(rest) + 1):
            user_part, server_part = rest[:cut], rest[cut:]
            for sp in (server_part, server_part.removeprefix("--")):
                try:
                    pair = (_unescape(user_part), _unescape(sp))
                except ValueError:
                    continue
                assert name(*pair) != n, f"{pair!r} takes the name of {victim!r}"


@pytest.mark.parametrize(
    ("user", "server", "most"),
    [
        pytest.param("alice", "", 0, id="user-only"),
        pytest.param("alice", "lab", 1, id="named-server"),
        pytest.param("a--b", "c--d", 1, id="separator-inside-both-parts"),
        pytest.param("alice", "-", 2, id="server-starting-with-an-escape"),
        pytest.param("_alice", "", 1, id="user-starting-with-an-escape"),
        pytest.param("_alice", "_lab", 3, id="both-starting-with-an-escape"),
    ],
)
def test_names_that_fit_never_look_cut(user, server, most):
    """The separator ``--`` appears once; a part starting with an escaped character adds a
    ``-`` next to one, yet never the ``--h--`` that marks a cut name."""
    n = name(user, server)
    assert len(n) <= MAX_LENGTH
    assert "--h--" not in n
    assert sum(n[i : i + 2] == "--" for i in range(len(n))) <= most
    assert unhashed_preimage(n) == (user, server)


def test_every_short_pair_over_a_hostile_alphabet_has_its_own_name():
    words = ["".join(w) for k in range(3) for w in itertools.product("a-_A.", repeat=k)]
    seen: dict[str, tuple[str, str]] = {}
    for user in words[1:]:  # JupyterHub refuses an empty username
        for server in words:
            n = name(user, server)
            assert n not in seen, f"{(user, server)!r} and {seen[n]!r} share {n!r}"
            seen[n] = (user, server)
            assert_dns_safe(n)
    assert len(seen) == (len(words) - 1) * len(words)


# -- properties over whatever users type --------------------------------------------------------

users = st.text(min_size=1) | st.builds(
    lambda head, tail: head + tail, st.text("aA_-.", min_size=40, max_size=70), st.text()
)
servers = st.just("") | st.text() | st.text("ab-_", min_size=30, max_size=60)


@settings(max_examples=200, deadline=None)
@given(user=users, server=servers)
def test_any_pair_gets_a_dns_safe_name_of_at_most_63(user, server):
    n = name(user, server)
    assert_dns_safe(n)
    assert n == name(user, server)
    if HASHED.search(n):
        assert unhashed_preimage(n) is None
    else:
        assert unhashed_preimage(n) == (user, server)


@settings(max_examples=60, deadline=None)
@given(pairs=st.sets(st.tuples(users, servers), min_size=20, max_size=80))
def test_no_two_generated_pairs_share_a_name(pairs):
    seen: dict[str, tuple[str, str]] = {}
    for pair in pairs:
        n = name(*pair)
        assert n not in seen, f"{pair!r} and {seen[n]!r} share {n!r}"
        seen[n] = pair


# -- the configurable prefix --------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix",
    [
        pytest.param("jupyter", id="default"),
        pytest.param("gpulab-lab1", id="with-dash-and-digit"),
        pytest.param("a" * 24, id="24-chars"),
    ],
)
def test_check_prefix_accepts_a_dns_label_start(prefix):
    assert check_prefix(prefix) == prefix
    assert_dns_safe(container_name(prefix, "x" * 300, "y" * 300))


@pytest.mark.parametrize(
    "prefix",
    [
        pytest.param("Jupyter", id="uppercase"),
        pytest.param("-x", id="leading-dash"),
        pytest.param("x-", id="trailing-dash"),
        pytest.param("a--b", id="double-dash"),
        pytest.param("a" * 25, id="25-chars"),
        pytest.param("", id="empty"),
        pytest.param("1lab", id="leading-digit"),
        pytest.param("lab_1", id="underscore"),
    ],
)
def test_check_prefix_refuses_with_the_accepted_form(prefix):
    with pytest.raises(ValueError) as e:
        check_prefix(prefix)
    msg = str(e.value)
    assert repr(prefix) in msg
    assert "1-24 lowercase letters, digits and single '-'" in msg
    assert "starting with a letter" in msg
    assert "'jupyter'" in msg
