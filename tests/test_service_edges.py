"""The core's promises at their edges (issue 21): text no page or database can hold is refused
where a request body becomes values, with a 400 naming the field, and changes nothing; such text
stored by an older version never takes a page down; Collect and Return name only an assignment
the course declares.

Through the service's real application, course manager and ledger (``course_web_support``: a
stand-in hub API, no engine), on SQLite and on PostgreSQL (whose text and JSON refuse NUL where
SQLite stores it).
"""

from __future__ import annotations

import dataclasses
from html import unescape

import pytest
from course_web_support import course_lab, flash
from ledger_support import backends, make_url

from jupyterhub_gpulab.courses.collect import Entry
from jupyterhub_gpulab.courses.store import CourseStore

DL101 = {"slug": "dl101", "title": "Deep learning 101", "term": "2026-fall", "profiles": ["cpu"],
         "assignments": [{"name": "hw1"}, {"name": "hw2"}]}  # fmt: skip
FREE = {"slug": "free1", "title": "Free 1", "profiles": ["cpu"]}
USERS = {"ta1": ["dl101-staff", "free1-staff"], "stu1": ["dl101"], "stu2": ["dl101", "free1"]}
OWNER = (1000, 1000)


@pytest.fixture(params=backends())
async def lab(request, tmp_path):
    url = make_url(request.param, tmp_path)
    lab = await course_lab(tmp_path, courses=[DL101, FREE], users=USERS, db_url=url)
    yield lab
    lab.stop()


def stored(lab, slug="dl101") -> dict | None:
    found = CourseStore(lab.ledger.engine).get(slug)
    return found.course.to_dict() if found else None


#: (a JSON body's text as a client sends it, the field the 400 names)
UNSTORABLE = [
    pytest.param('{"title": "\\ud800"}', "Field 'title'", id="title-lone-high-surrogate"),
    pytest.param('{"term": "x\\udcff"}', "Field 'term'", id="term-lone-low-surrogate"),
    pytest.param('{"title": "ab\\u0000c"}', "Field 'title'", id="title-NUL"),
    pytest.param('{"sessions": [{"day": "mon", "start": "10:00", "end": "\\ud800"}]}',
                 "Field 'sessions'[0]['end']", id="nested"),
]  # fmt: skip


@pytest.mark.parametrize("body, field", UNSTORABLE)
async def test_staff_saving_text_no_page_can_show_get_a_400_naming_the_field(lab, body, field):
    before = stored(lab)
    code, answer = await lab.api("ta1", "PUT", "courses/dl101", body.encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    assert code == 400, answer
    assert answer["status"] == 400 and answer["message"].startswith(field), answer
    assert "Nothing was changed" in answer["message"]
    assert stored(lab) == before
    # every page that shows the course still renders
    assert "Deep learning 101" in await lab.page("stu1", "me")
    assert "Deep learning 101" in await lab.page("ta1", "courses/dl101")


async def test_an_admin_cannot_create_a_course_whose_title_no_page_can_show(lab):
    for title in ("\\ud800", "a\\u0000b"):
        body = '{"slug": "ab", "title": "' + title + '", "profiles": ["cpu"]}'
        code, answer = await lab.api("admin", "POST", "courses", body.encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        assert code == 400 and answer["message"].startswith("Field 'title'"), answer
        assert stored(lab, "ab") is None
    assert "Deep learning 101" in await lab.page("admin", "courses")
    # a character beyond the BMP (a surrogate PAIR in JSON) is text: saved and shown whole
    body = b'{"slug": "ab", "title": "AI \\ud83e\\udd16", "profiles": ["cpu"]}'
    code, answer = await lab.api("admin", "POST", "courses", body,
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    assert code == 201, answer
    assert stored(lab, "ab")["title"] == "AI \N{ROBOT FACE}"
    assert "AI \N{ROBOT FACE}" in await lab.page("admin", "courses")


async def test_the_course_page_forms_refuse_unstorable_text_and_change_nothing(lab):
    before = stored(lab)
    # the Advanced record (JSON in a form field): the escape names its field inside the record
    code, _, text = await lab.request("ta1", "POST", "courses/dl101/actions/record",
                                      form={"record": '{"title": "\\ud800"}'})  # fmt: skip
    assert code == 400 and "Form field 'record'['title'] holds a lone surrogate" in unescape(text)
    # a raw NUL in a form field: refused (Tornado would silently make it a space)
    code, _, text = await lab.request("ta1", "POST", "courses/dl101/actions/assignment",
                                      form={"name": "hw\x003"})  # fmt: skip
    assert code == 400 and "Form field 'name' holds a NUL character" in unescape(text)
    # a lone surrogate cannot come as UTF-8: its 3 bytes (%ED%A0%80, CESU-8's) are not UTF-8
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    code, _, text = await lab.request("ta1", "POST", "courses/dl101/actions/assignment",
                                      b"name=hw%ED%A0%80", headers=form)  # fmt: skip
    assert code == 400 and "The form field 'name' is not UTF-8 text." in unescape(text)
    assert stored(lab) == before


async def test_a_title_stored_by_an_older_version_shows_replaced_not_a_500(lab):
    """A lone surrogate already stored (the service took them before: the record's JSON keeps
    it escaped, on both databases) is shown as U+FFFD on every page; the API's JSON escapes it."""
    store = CourseStore(lab.ledger.engine)
    old = store.get("dl101").course
    store.put(dataclasses.replace(old, title="Deep \ud800 learning"), by="v6.0")
    for who, path in (("stu1", "me"), ("ta1", "courses/dl101"), ("admin", "courses")):
        page = await lab.page(who, path)
        assert "Deep \N{REPLACEMENT CHARACTER} learning" in page, (who, path)
    code, answer = await lab.api("ta1", "GET", "courses/dl101")
    assert code == 200 and answer["course"]["title"] == "Deep \ud800 learning"  # JSON escapes it


async def test_a_drain_reason_no_database_can_hold_is_a_400_and_drains_nothing(lab):
    """SQLite cannot encode a lone surrogate, PostgreSQL's text holds no NUL: both were a 500."""
    node = lab.state.node
    for reason in ("fan\\u0000", "\\ud800"):
        code, answer = await lab.api("admin", "POST", f"nodes/{node}/drain",
                                     b'{"reason": "%s"}' % reason.encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        assert code == 400 and answer["message"].startswith("Field 'reason' holds"), answer
        assert not lab.ledger.node(node).drained
    code, answer = await lab.api("admin", "POST", f"nodes/{node}/drain", {"reason": "fan"})
    assert code == 200, answer
    assert lab.ledger.node(node).drained


# -- Collect and Return name a declared assignment -------------------------------------------


async def test_collect_of_an_assignment_the_course_does_not_declare_is_refused(lab):
    files = lab.engine.files
    s = lab.courses.settings
    files.write_tree(s.work_of("dl101", "stu1"), "assignments/nope",
                     [Entry("a.py", b"work", 1.0)], OWNER)  # fmt: skip
    for action, done in (("collect", "collected"), ("return", "returned")):
        code, body = await lab.api("ta1", "POST", f"courses/dl101/{action}", {"assignment": "nope"})
        assert (code, body["message"]) == (
            400,
            f"dl101 declares no assignment 'nope'; its assignments are hw1, hw2. "
            f"Nothing was {done}.",
        )
        page = await lab.form("ta1", "dl101", action, {"assignment": "nope"})
        assert flash(page) == (
            f"danger: dl101 declares no assignment 'nope'; its assignments are hw1, hw2. "
            f"Nothing was {done}."
        )
    with pytest.raises(FileNotFoundError):  # nothing was copied
        files.read_tree(s.staff_of("dl101"), "collected", 10**6)
    # a declared one is collected as before
    code, body = await lab.api("ta1", "POST", "courses/dl101/collect", {"assignment": "hw1"})
    assert (code, body["message"]) == (200, "0 of 2 submitted.")
    # a course that declares none takes any folder name (free-form, as the guide says)
    code, body = await lab.api("ta1", "POST", "courses/free1/collect", {"assignment": "nope"})
    assert (code, body["message"]) == (200, "0 of 1 submitted.")
