"""The spawn form (``spawner/form.py``) as a user meets it: one radio button per profile they may
pick, with live capacity; what cannot be picked now is disabled with the reason and never
preselected. The HTML is read with ``html_support``; no exact-HTML assertions."""

from __future__ import annotations

import pytest
from form_support import BY_SLUG, FREE, IMG, PROFILES, capacity_of, radios, rows
from html_support import parse_html

from jupyterhub_gpulab.lab.profiles import load_profiles
from jupyterhub_gpulab.spawner.form import form_rows, render_form


def render(profiles=PROFILES, free=FREE, preselect=None, quota_reason=None) -> dict[str, dict]:
    rows = form_rows(profiles, capacity_of(free), preselect=preselect, quota_reason=quota_reason)
    return radios(render_form(rows))


# -- what each row says -------------------------------------------------------------------------


def test_one_radio_per_entitled_profile_in_config_order():
    assert list(render()) == ["cpu", "mig-1g", "seat", "a100"]
    assert list(render(profiles=PROFILES[1:2])) == ["mig-1g"]


@pytest.mark.parametrize(
    ("slug", "badge", "says"),
    [
        pytest.param("cpu", "CPU only", ["No GPU", "1 CPU", "4 GiB memory"], id="cpu"),
        pytest.param(
            "mig-1g",
            "3 of 14 free",
            ["MIG 1g.10gb", "hardware-isolated", "2 CPUs", "8 GiB memory", "Coursework."],
            id="mig",
        ),
        pytest.param("seat", "0 of 4 free", ["shared GPU seat", "not isolated"], id="shared-seat"),
        pytest.param("a100", "0 of 0 free", ["whole GPU (A100)"], id="gpu-model"),
    ],
)
def test_each_row_shows_live_capacity_and_what_it_gives(slug, badge, says):
    row = render()[slug]
    assert row["badge"] == badge
    for phrase in says:
        assert phrase in row["text"]


def test_capacity_is_read_live_for_each_render():
    assert render(free={**FREE, "mig-1g": (13, 14)})["mig-1g"]["badge"] == "13 of 14 free"


@pytest.mark.parametrize(
    ("slug", "reason"),
    [
        pytest.param(
            "seat",
            "All taken right now; join the waitlist or try again later.",
            id="all-seats-taken",
        ),
        pytest.param("a100", "This lab has no such GPU slice right now.", id="none-in-this-lab"),
    ],
)
def test_a_full_profile_is_disabled_with_its_reason_and_never_preselected(slug, reason):
    row = render(preselect=slug)[slug]
    assert "disabled" in row
    assert "checked" not in row
    assert row["why"] == reason  # the text the radio's aria-describedby points at


def test_a_reservation_shows_as_a_badge_and_disables_a_profile_whose_free_slices_it_keeps():
    from datetime import datetime, timezone

    from jupyterhub_gpulab.ledger import Reserved

    until = datetime(2026, 12, 1, 16, 0, tzinfo=timezone.utc)
    dl101 = Reserved("DL101", "mig-1g", unclaimed=3, count=3, total=14, until=until)

    def kept(n):
        return lambda p: [Reserved("DL101", p.slug, n, 3, 14, until)] if p.slug == "mig-1g" else []

    out = radios(
        render_form(form_rows(PROFILES, capacity_of(FREE), preselect=None, reserved=kept(2)))
    )
    assert "2 of 14 reserved for DL101 until 16:00" in out["mig-1g"]["badge"]
    assert "disabled" not in out["mig-1g"]  # 3 free, 2 kept: one left for everyone
    out = radios(
        render_form(form_rows(PROFILES, capacity_of(FREE), preselect=None, reserved=kept(3)))
    )
    assert "disabled" in out["mig-1g"] and "reserved for DL101" in out["mig-1g"]["why"]
    assert dl101.describe().startswith("3 of 14 reserved for DL101 until 16:00")


def test_pickable_rows_are_enabled_and_say_no_reason():
    out = render()
    for slug in ("cpu", "mig-1g"):
        assert "disabled" not in out[slug]
        assert out[slug]["why"] == ""
        assert "All taken" not in out[slug]["text"]


# -- which one is preselected -------------------------------------------------------------------


def checked(out: dict[str, dict]) -> list[str]:
    return [slug for slug, r in out.items() if "checked" in r]


@pytest.mark.parametrize(
    ("preselect", "expected"),
    [
        pytest.param("mig-1g", "mig-1g", id="requested-and-pickable"),
        pytest.param("seat", "cpu", id="requested-but-full-falls-back-to-first-pickable"),
        pytest.param("a100", "cpu", id="requested-but-absent-falls-back"),
        pytest.param("gone", "cpu", id="unknown-slug-falls-back"),
        pytest.param(None, "cpu", id="nothing-requested"),
    ],
)
def test_exactly_one_pickable_row_is_preselected(preselect, expected):
    assert checked(render(preselect=preselect)) == [expected]


def test_first_pickable_is_not_simply_the_first_row():
    full_first = (BY_SLUG["seat"], BY_SLUG["mig-1g"], BY_SLUG["cpu"])
    assert checked(render(profiles=full_first, preselect="seat")) == ["mig-1g"]


def test_nothing_is_preselected_when_nothing_can_be_picked():
    out = render(profiles=(BY_SLUG["seat"], BY_SLUG["a100"]))
    assert checked(out) == []
    assert all("disabled" in r for r in out.values())


# -- quota --------------------------------------------------------------------------------------


def test_quota_disables_gpu_rows_but_not_cpu_ones():
    reason = "You already hold 1 GPU slice, your limit; stop a server to start another."
    out = render(free={**FREE, "seat": (2, 4)}, preselect="mig-1g", quota_reason=reason)
    for slug in ("mig-1g", "seat"):
        assert "disabled" in out[slug]
        assert out[slug]["why"] == reason
    assert "disabled" not in out["cpu"]
    assert reason not in out["cpu"]["text"]
    assert checked(out) == ["cpu"]


def test_quota_keeps_the_live_capacity_visible():
    out = render(quota_reason="over quota")
    assert out["mig-1g"]["badge"] == "3 of 14 free"


# -- nothing to pick, and hostile text ----------------------------------------------------------


def test_no_rows_says_there_is_no_profile_you_may_pick():
    html = render_form(form_rows((), capacity_of({}), preselect=None))
    page = parse_html(html)
    assert rows(page) == []
    assert "input" not in page.tags()
    assert "no profile you may pick" in page.text()
    assert "no profile you may pick" not in render_form(
        form_rows(PROFILES, capacity_of(FREE), preselect=None)
    )


@pytest.mark.parametrize(
    "field_name", [pytest.param("display_name", id="name"), pytest.param("description", id="desc")]
)
def test_profile_text_is_shown_as_text_never_as_markup(field_name):
    hostile = '<script>alert(1)</script><img src=x onerror="alert(2)">'
    (p,) = load_profiles(
        [{"slug": "evil", "display_name": "Evil", "image": IMG, field_name: hostile}]
    )
    html = render_form(form_rows((p,), capacity_of({}), preselect=None))
    page = parse_html(html)
    assert "script" not in page.tags()
    assert "img" not in page.tags()
    (row,) = rows(page)
    assert hostile in row.text()  # shown verbatim, as the admin typed it


def test_a_hostile_quota_reason_is_text():
    made = form_rows(
        (BY_SLUG["mig-1g"],), capacity_of(FREE), preselect=None, quota_reason='"><script>x</script>'
    )
    html = render_form(made)
    page = parse_html(html)
    assert "script" not in page.tags()
    assert '"><script>x</script>' in rows(page)[0].text()
    assert rows(page)[0].find("input").attrs["value"] == "mig-1g"


@pytest.mark.parametrize(
    ("held", "limit", "text"),
    [
        pytest.param(
            0, 1, "You hold 0 of the 1 GPU slice your groups allow at once.", id="none-of-one"
        ),
        pytest.param(
            2, 3, "You hold 2 of the 3 GPU slices your groups allow at once.", id="two-of-three"
        ),
        pytest.param(1, None, "You hold 1 GPU slice.", id="unlimited"),
    ],
)
def test_usage_note_tells_the_user_their_use_of_the_limit(held, limit, text):
    from jupyterhub_gpulab.spawner.form import render_form, usage_note

    assert usage_note(held, limit) == text
    assert text in render_form([], usage_note(held, limit))


def test_a_drained_profile_says_out_of_service_not_missing():
    from jupyterhub_gpulab.lab.profiles import load_profiles
    from jupyterhub_gpulab.spawner.form import form_rows

    profiles = load_profiles(
        [
            {
                "slug": "mig",
                "display_name": "MIG",
                "image": "i",
                "slice": {"kind": "mig", "mig_profile": "1g.10gb"},
            },
            {
                "slug": "a40",
                "display_name": "A40",
                "image": "i",
                "slice": {"kind": "gpu", "model": "A40"},
            },
            {"slug": "cpu", "display_name": "CPU", "image": "i"},
        ]
    )
    drained = {"mig": 2, "a40": 0}
    rows = {
        r.slug: r
        for r in form_rows(
            profiles,
            lambda req: (0, 0),
            preselect=None,
            out_of_service=lambda req: drained["mig" if req.mig_profile else "a40"],
        )
    }
    assert rows["mig"].capacity == "out of service"
    assert "maintenance" in rows["mig"].disabled_reason
    assert rows["a40"].disabled_reason == "This lab has no such GPU slice right now."
    assert rows["cpu"].checked and rows["cpu"].disabled_reason is None


# -- a slice held for the user (a waitlist offer) -------------------------------------------------


def test_a_held_profile_is_pickable_preselected_and_says_until_when():
    from datetime import datetime, timezone

    from jupyterhub_gpulab.spawner.form import limit_reason

    until = datetime(2026, 12, 1, 1, 21, tzinfo=timezone.utc)
    reason = limit_reason(0, 1, ["PyTorch (MIG 1g.10gb)"])
    made = form_rows(
        PROFILES,
        capacity_of({**FREE, "mig-1g": (0, 2), "seat": (2, 4)}),
        preselect="cpu",  # the saved choice: the hold wins over it
        quota_reason=reason,
        held={"mig-1g": until},
    )
    out = radios(render_form(made))
    assert "disabled" not in out["mig-1g"] and checked(out) == ["mig-1g"]
    assert out["mig-1g"]["badge"] == "held for you until 01:21 UTC"
    assert "disabled" in out["seat"] and out["seat"]["why"] == reason
    assert "disabled" not in out["cpu"]


@pytest.mark.parametrize(
    ("held", "limit", "holds", "says"),
    [
        pytest.param(0, 1, [], None, id="room"),
        pytest.param(1, 1, [], "stop a server first", id="servers-at-limit"),
        pytest.param(0, 1, ["PyTorch"], "The slice held for you ('PyTorch')", id="hold-at-limit"),
        pytest.param(0, 2, ["PyTorch"], None, id="hold-with-room"),
        pytest.param(1, 2, ["PyTorch"], "or stop a server first", id="hold-and-server"),
        pytest.param(5, None, ["PyTorch"], None, id="no-limit"),
    ],
)
def test_the_limit_counts_holds_as_the_claim_does(held, limit, holds, says):
    from jupyterhub_gpulab.spawner.form import limit_reason

    got = limit_reason(held, limit, holds)
    assert got is None if says is None else says in got


def test_usage_note_counts_a_hold_apart_from_the_servers():
    from jupyterhub_gpulab.spawner.form import usage_note

    assert usage_note(0, 1, 1) == (
        "You hold 0 of the 1 GPU slice your groups allow at once. 1 more is held for you to "
        "take (it counts toward that limit)."
    )
    assert usage_note(1, None, 2) == "You hold 1 GPU slice. 2 more are held for you to take."


# -- the waitlist is one click away -------------------------------------------------------------


def test_join_the_waitlist_in_a_full_rows_reason_is_a_link_to_the_waitlist():
    url = "/services/gpulab/me#my-waitlist"
    rows = form_rows(PROFILES, capacity_of(FREE), preselect=None)
    page = parse_html(render_form(rows, waitlist_url=url))
    links = {n.attrs.get("href") for n in page.find_all("a")}
    assert links == {url}
    (why,) = [n for n in page.find_all("small") if n.attrs.get("id") == "why-seat"]
    assert why.text() == "All taken right now; join the waitlist or try again later."
    assert [a.text() for a in why.find_all("a")] == ["join the waitlist"]
    # without a waitlist page (no service), the reason reads the same and links nowhere
    assert not parse_html(render_form(rows)).find_all("a")


def test_a_reason_stays_escaped_when_its_words_become_a_link():
    from jupyterhub_gpulab.spawner.form import FormRow

    hostile = FormRow("x", "X", "", "", "", "", False, "<b>x</b>; join the waitlist")
    html = render_form([hostile], waitlist_url="/w")
    assert "<b>" not in html and "&lt;b&gt;" in html
    assert [a.attrs["href"] for a in parse_html(html).find_all("a")] == ["/w"]


@pytest.mark.parametrize(
    ("url", "hub_base", "href"),
    [
        pytest.param("services/gpulab/me#my-waitlist", "/hub/", "/services/gpulab/me#my-waitlist", id="root"),
        pytest.param("services/gpulab/me#my-waitlist", "/jh/hub/", "/jh/services/gpulab/me#my-waitlist", id="base-url"),
        pytest.param("/elsewhere", "/jh/hub/", "/elsewhere", id="absolute"),
        pytest.param("", "/hub/", "", id="none"),
    ],
)  # fmt: skip
def test_the_waitlist_link_follows_the_hubs_base_url(url, hub_base, href):
    from jupyterhub_gpulab.spawner.form import waitlist_href

    assert waitlist_href(url, hub_base) == href


def test_configure_service_gives_the_spawn_form_its_waitlist_link():
    from traitlets.config import Config

    from jupyterhub_gpulab.hub.hubconfig import configure_service

    c = Config()
    configure_service(c)
    assert c.GPUDockerSpawner.waitlist_url == "services/gpulab/me#my-waitlist"


def test_a_full_profile_the_user_fills_himself_offers_no_waitlist():
    """A researcher whose default server holds a seat (all taken) opens the form for a named
    server: the row says his own server holds one, not 'join the waitlist' (the queue's next
    free slice could be his own); a user who holds another profile's slice is offered it."""
    rows = form_rows(PROFILES, capacity_of(FREE), preselect=None, mine={"seat": 1})
    page = parse_html(render_form(rows, waitlist_url="/services/gpulab/me#my-waitlist"))
    assert radios(render_form(rows))["seat"]["why"] == (
        "All taken right now, 1 by your own server: stop it to use it here, or pick another "
        "profile."
    )
    assert not page.find_all("a")
    others = form_rows(PROFILES, capacity_of(FREE), preselect=None, mine={"mig-1g": 1})
    assert radios(render_form(others))["seat"]["why"] == (
        "All taken right now; join the waitlist or try again later."
    )
