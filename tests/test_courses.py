"""Courses without a hub: the record's validation, session expansion (weekly rules in the lab's
time zone, one-off dates, iCal), the ledger store with its audit trail, the CSV roster preview
and the content pull script."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpulab.courses.content import pull_script, start_command
from jupyterhub_gpulab.courses.model import CourseError
from jupyterhub_gpulab.courses.parse import parse_course, parse_courses
from jupyterhub_gpulab.courses.roster import csv_preview, parse_csv
from jupyterhub_gpulab.courses.sessions import next_session, sessions_between
from jupyterhub_gpulab.courses.store import CourseStore
from jupyterhub_gpulab.ledger import Ledger

BERLIN = ZoneInfo("Europe/Berlin")
UTC = timezone.utc
WEEKLY = {
    "days": ["mon", "wed"],
    "start": "10:00",
    "end": "11:30",
    "from": "2026-10-19",
    "until": "2026-11-06",
}
ICAL = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\nBEGIN:VEVENT\r\nUID:x@t\r\n"
    "DTSTART:20261021T120000Z\r\nDTEND:20261021T130000Z\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
)


def ical_rule(rrule: str) -> str:
    """A calendar of one event from tomorrow, repeating by ``rrule``."""
    day = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y%m%d")
    return (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\nBEGIN:VEVENT\r\nUID:r@t\r\n"
        f"DTSTART:{day}T100000Z\r\nDTEND:{day}T110000Z\r\nRRULE:{rrule}\r\nEND:VEVENT\r\n"
        "END:VCALENDAR\r\n"
    )


def test_a_stored_rule_that_fires_every_second_is_expanded_only_so_far():
    """A record saved before such rules were refused (read back from the ledger without the
    check) must not hang the pages: the expansion stops at MAX_SESSIONS. It hung the service
    (every page that shows a course's next session) and grew its memory by 50 MB/s."""
    from dataclasses import replace

    from jupyterhub_gpulab.courses.sessions import MAX_SESSIONS, next_session

    c = replace(parse_course({"slug": "ml101"}), ical=ical_rule("FREQ=SECONDLY"))
    now = datetime.now(UTC)
    got = sessions_between(c, now, now + timedelta(days=400))
    assert len(got) == MAX_SESSIONS
    assert next_session(c, now + timedelta(days=1)) is not None


def test_weekly_rules_stay_at_local_wall_clock_time_across_daylight_saving():
    c = parse_course({"slug": "ml101", "sessions": {"weekly": [WEEKLY]}})
    got = sessions_between(
        c, datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC), BERLIN
    )
    assert len(got) == 6  # Mon/Wed for three weeks
    # 10:00 in Berlin is 08:00 UTC in summer time, 09:00 after 25 October
    assert got[0] == (
        datetime(2026, 10, 19, 8, 0, tzinfo=UTC),
        datetime(2026, 10, 19, 9, 30, tzinfo=UTC),
    )
    assert got[2][0] == datetime(2026, 10, 26, 9, 0, tzinfo=UTC)


def test_one_off_dates_and_ical_events_join_the_weekly_sessions():
    c = parse_course(
        {
            "slug": "ml101",
            "sessions": {
                "weekly": [WEEKLY],
                "dates": [{"start": "2026-10-20T14:00", "end": "2026-10-20T15:00"}],
                "ical": ICAL,
            },
        }
    )
    got = sessions_between(
        c, datetime(2026, 10, 19, 9, tzinfo=UTC), datetime(2026, 10, 22, tzinfo=UTC), BERLIN
    )
    assert [s for s, _ in got] == [
        datetime(2026, 10, 19, 8, 0, tzinfo=UTC),  # running at the window's start: included
        datetime(2026, 10, 20, 12, 0, tzinfo=UTC),
        datetime(2026, 10, 21, 8, 0, tzinfo=UTC),
        datetime(2026, 10, 21, 12, 0, tzinfo=UTC),
    ]
    assert next_session(c, datetime(2026, 10, 20, 13, tzinfo=UTC), BERLIN)[0] == datetime(
        2026, 10, 21, 8, tzinfo=UTC
    )


@pytest.mark.parametrize(
    "record, says",
    [
        pytest.param({"slug": "ML 101"}, "'slug' must be", id="bad-slug"),
        pytest.param(
            {
                "slug": "ml101",
                "sessions": {
                    "weekly": [
                        {**WEEKLY, "days": ["sat"], "from": "2026-12-07", "until": "2026-12-11"}
                    ]
                },
            },
            "never fires",
            id="rule-never-fires",
        ),
        pytest.param(
            {"slug": "ml101", "sessions": {"weekly": [{**WEEKLY, "end": "09:00"}]}},
            "must be after start",
            id="end-before-start",
        ),
        pytest.param(
            {"slug": "ml101", "content": [{"repo": "/srv/x"}]},
            "must be a git URL",
            id="repo-not-a-url",
        ),
        pytest.param(
            {"slug": "ml101", "content": [{"repo": "https://u:pw@h/x.git"}]},
            "password",
            id="repo-with-password",
        ),
        pytest.param(
            {"slug": "ml101", "profiles": ["gpu-xl"]}, "not one of the lab's", id="unknown-profile"
        ),
        pytest.param(
            {"slug": "ml101", "sessions": {"ical": "hello"}}, "sessions.ical", id="bad-ical"
        ),
        pytest.param(
            {"slug": "ml101", "sessions": {"ical": ical_rule("FREQ=SECONDLY")}},
            "repeats secondly",
            id="ical-every-second",
        ),
        pytest.param(
            {
                "slug": "ml101",
                "sessions": {"ical": ical_rule("FREQ=DAILY;BYHOUR=8,9,10,11;BYMINUTE=0,30")},
            },
            "more than 1000 sessions in the next 400 days",
            id="ical-every-half-hour",
        ),
        pytest.param(
            {"slug": "ml101", "roster_group": "x", "staff_group": "x"},
            "must differ",
            id="same-groups",
        ),
        pytest.param({"slug": "ml101", "colour": "red"}, "unknown keys", id="unknown-key"),
        pytest.param(
            {"slug": "ml101", "gpu_hours": float("nan")}, "'gpu_hours' must be", id="nan-budget"
        ),
        pytest.param({"slug": "ml101", "gpu_hours": 1e400}, "'gpu_hours' must be", id="inf-budget"),
        pytest.param(
            {"slug": "ml101", "collect_max_bytes": 10**14},
            "'collect_max_bytes' must be",
            id="huge-collect",
        ),
        pytest.param({"slug": "ml101", "title": "x" * 60_000}, "at most 255", id="huge-title"),
    ],
)
def test_a_bad_course_is_refused_naming_the_field(record, says):
    with pytest.raises(CourseError) as e:
        parse_course(record, profiles={"cpu"})
    assert says in str(e.value)


def test_two_courses_with_one_slug_are_refused():
    with pytest.raises(CourseError, match="two courses have the slug 'ml101'"):
        parse_courses([{"slug": "ml101"}, {"slug": "ml101"}])


def test_a_record_round_trips_through_its_dict():
    c = parse_course(
        {
            "slug": "ml101",
            "title": "ML",
            "profiles": ["cpu"],
            "gpu_hours": 10,
            "content": ["https://git.example.edu/ml/notes.git"],
            "sessions": {"weekly": [WEEKLY], "ical": ICAL},
        }
    )
    assert (
        c.content[0].dir == "notes" and c.roster_group == "ml101" and c.staff_group == "ml101-staff"
    )
    assert parse_course(c.to_dict()) == c


def test_the_store_keeps_records_and_audits_every_change(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    store = CourseStore(led.engine)
    c = parse_course({"slug": "ml101", "title": "ML"})
    assert store.declare([c]) == ["ml101"]
    assert store.declare([c]) == []  # unchanged: no write, no audit row
    c2 = parse_course({"slug": "ml101", "title": "ML, fall"})
    assert store.put(c2, by="prof") is True
    assert store.get("ml101").course.title == "ML, fall"
    audit = store.audit("ml101")
    assert [(a.who, a.action) for a in audit] == [("prof", "update"), ("config", "create")]
    assert audit[0].detail["changed"]["title"] == {"from": "ML", "to": "ML, fall"}
    start = datetime(2026, 10, 19, 8, tzinfo=UTC)
    assert store.begin_prestart("ml101", start) is True
    assert store.begin_prestart("ml101", start) is False  # once per session
    store.finish_prestart("ml101", start, "8 of 8 ready")
    assert store.prestarts("ml101")[start][1] == "8 of 8 ready"
    led.close()


def test_a_csv_preview_says_who_is_added_removed_and_unknown():
    names = parse_csv("username,email\nann,a@x\nbob,b@x\nzed,z@x\n")
    assert names == ["ann", "bob", "zed"]
    pv = csv_preview(names, current={"bob", "cat"}, known={"ann", "bob"})
    assert pv.as_dict() == {
        "added": ["ann"],
        "removed": ["cat"],
        "unknown": ["zed"],
        "kept": ["bob"],
    }
    assert parse_csv("ann\n# comment\n\nbob\n") == ["ann", "bob"]
    with pytest.raises(ValueError, match="no usernames"):
        parse_csv("\n\n")


def test_the_start_command_pulls_each_source_then_runs_the_server():
    c = parse_course(
        {
            "slug": "ml101",
            "content": [
                {"repo": "https://h/a.git", "dir": "a"},
                {"repo": "git://h/b.git", "branch": "w1"},
            ],
        }
    )
    script = pull_script(c.content, "/home/jovyan")
    # each source in the record's order (tests/test_courses_content.py runs the script for real)
    a, b = (
        script.index("_gpulab_pull https://h/a.git main a"),
        script.index("_gpulab_pull git://h/b.git w1 b"),
    )
    assert a < b
    cmd = start_command(c, "/home/jovyan")
    assert (
        cmd[:2] == ["sh", "-c"]
        and cmd[2].endswith('exec "$@"\n')
        and cmd[-1] == "jupyterhub-singleuser"
    )


def test_check_config_lists_bad_courses(capsys, tmp_path):
    from cli_support import PROFILES, write_config
    from ledger_support import LAB

    from jupyterhub_gpulab.cli import main

    courses = [
        {"slug": "ml101", "profiles": ["nope"]},
        {
            "slug": "dl201",
            "sessions": {
                "weekly": [
                    {
                        "days": ["sun"],
                        "start": "10:00",
                        "end": "11:00",
                        "from": "2026-12-07",
                        "until": "2026-12-11",
                    }
                ]
            },
        },
        {"slug": "sh101", "shared_folder": "/"},
    ]
    config = write_config(
        tmp_path,
        f"c.GPULab.inventory = {LAB!r}\nc.GPULab.profiles = {PROFILES!r}\n"
        f"c.GPULabCourses.courses = {courses!r}\n",
    )
    assert main(["check-config", "-f", str(config)]) == 1
    err = capsys.readouterr().err
    assert "c.GPULabCourses.courses[0] ('ml101')" not in err  # where = courses[i]
    assert "courses[0]: profile 'nope' is not one of the lab's" in err
    assert (
        "courses[1]: sessions.weekly[0] never fires: no sun between 2026-12-07 and 2026-12-11"
        in err
    )
    assert (
        "courses[2]: 'shared_folder' must be a folder under /srv/gpulab/courses "
        "(c.GPULabCourses.shared_folder_root), not '/'" in err
    )


def test_a_prestart_summary_counts_states_and_names_the_commonest_reason():
    from jupyterhub_gpulab.courses.prestart import PrestartRun

    run = PrestartRun(parse_course({"slug": "ml101"}), [f"u{i}" for i in range(60)])
    states = ["ready"] * 41 + ["refused"] * 3 + ["starting"] * 16
    for p, st in zip(run.servers.values(), states):
        p.state = st
        p.reason = "no free slice" if st == "refused" else ""
    assert run.summary() == "41 of 60 ready, 16 starting, 3 refused: no free slice"


def test_a_shared_folder_lies_under_the_admins_root(tmp_path):
    """Resolved: no '..', no symbolic link out of the root, not the root itself; a path outside
    is refused naming the root (the hub mounts it into every roster member's server)."""
    from jupyterhub_gpulab.courses.model import shared_folder_problem

    root = tmp_path / "courses"
    (root / "ml101").mkdir(parents=True)
    (root / "escape").symlink_to("/etc")
    assert shared_folder_problem(str(root / "ml101"), str(root)) is None
    assert shared_folder_problem(str(root / "not-yet"), str(root)) is None
    for bad in ("/", "/etc", str(root / "ml101" / ".." / ".."), str(root / "escape"),
                str(root), str(root) + "-other", "relative/x"):  # fmt: skip
        problem = shared_folder_problem(bad, str(root))
        assert problem is not None, bad
    assert str(root) in shared_folder_problem("/etc", str(root))
    assert "resolves to /etc" in shared_folder_problem(str(root / "escape"), str(root))
    assert "shared_folder_root" in shared_folder_problem("/x", "")
    with pytest.raises(CourseError, match="must be a folder under"):
        parse_course({"slug": "ml101", "shared_folder": "/"}, shared_root=str(root))
    # records already stored are read without the root (the hub checks again at mount time)
    assert parse_course({"slug": "ml101", "shared_folder": "/"}).shared_folder == "/"


@pytest.mark.parametrize(
    "repo, ok",
    [
        ("https://git.example.edu/ml101.git", True),
        ("git://git.example.edu/ml101.git", True),
        ("ssh://git@git.example.edu:2222/ml101.git", True),
        ("http://git.example.edu/ml101.git", False),
        ("http://169.254.169.254/latest/meta-data", False),
        ("file:///srv/ml101.git", False),
        ("ext::sh -c touch% /tmp/pwned", False),
        ("ssh://-oProxyCommand=touch%20/tmp/pwned/x.git", False),
        ("ssh://-oProxyCommand=id@host/x.git", False),
        ("ssh://-Fevil/x.git", False),
        ("ssh://-lroot@host/x.git", False),
        ("https://git.example.edu:99999999/x.git", False),
    ],
)
def test_content_repositories_use_https_git_or_ssh_only(repo, ok):
    record = {"slug": "ml101", "content": [{"repo": repo, "dir": "x"}]}
    if ok:
        assert parse_course(record).content[0].repo == repo
    else:
        with pytest.raises(CourseError, match="'repo'"):
            parse_course(record)


def test_the_reachability_check_lets_git_use_the_record_schemes_only(monkeypatch):
    """git ls-remote runs with GIT_ALLOW_PROTOCOL (so an https redirect to http:// is not
    followed)."""
    import asyncio

    from jupyterhub_gpulab.courses import content

    seen = {}

    async def fake_exec(*args, env=None, **kw):
        seen.update(env)
        raise FileNotFoundError

    monkeypatch.setattr(content.asyncio, "create_subprocess_exec", fake_exec)
    asyncio.run(content.check_reachable("https://h/x.git", "main"))
    assert seen["GIT_ALLOW_PROTOCOL"] == "https:git:ssh"


def test_staff_roles_hold_no_hub_scope_over_servers():
    from jupyterhub_gpulab.courses.hubhook import staff_scopes

    scopes = staff_scopes("ml101")
    assert not [s for s in scopes if s.split("!")[0] in ("servers", "access:servers",
                                                          "admin:servers", "delete:servers")]  # fmt: skip
    assert "read:users:name!group=ml101" in scopes


def test_a_courses_profiles_must_be_open_to_its_roster_group():
    from types import SimpleNamespace

    from jupyterhub_gpulab.courses.access import roster_profile_problems
    from jupyterhub_gpulab.lab.policyload import load_policies
    from jupyterhub_gpulab.lab.profiles import load_profiles

    profiles = load_profiles([
        {"slug": "cpu", "display_name": "CPU", "image": "i", "default": True},
        {"slug": "pytorch-a40", "display_name": "A40", "image": "i",
         "slice": {"kind": "gpu", "model": "A40"}, "groups": ["researchers"]},
        {"slug": "mig", "display_name": "MIG", "image": "i",
         "slice": {"kind": "mig", "mig_profile": "1g.5gb"}},
    ])  # fmt: skip
    policies = load_policies(
        {"ml101": {"profiles": ["cpu"]}, "researchers": {}, "dl201": {"profiles": ["pytorch-a40"]}},
        [p.slug for p in profiles],
    )
    lab = SimpleNamespace(profiles=profiles, policies=policies, default_policy=None,
                          tz=UTC, term=None)  # fmt: skip
    bad = parse_course({"slug": "ml101", "profiles": ["cpu", "pytorch-a40", "mig"]})
    problems = roster_profile_problems(bad, lab)
    assert len(problems) == 2, problems
    assert "'pytorch-a40'" in problems[0] and "dl201, researchers" in problems[0]
    assert "roster group 'ml101'" in problems[0] and "may use cpu" in problems[0]
    assert "'mig'" in problems[1] and "no group" not in problems[1]
    assert roster_profile_problems(parse_course({"slug": "ml101", "profiles": ["cpu"]}), lab) == []
    # a roster under no policy may use every open profile
    assert roster_profile_problems(parse_course({"slug": "cv400", "profiles": ["mig"]}), lab) == []
    # the policy of dl201 lists the A40 profile: that grants it although its groups do not
    assert (
        roster_profile_problems(parse_course({"slug": "dl201", "profiles": ["pytorch-a40"]}), lab)
        == []
    )


def test_the_hub_mounts_no_shared_folder_outside_the_root(tmp_path):
    """A record stored before the root was set (or written around the service) is checked
    again by the hub's hook: a folder under the root is mounted, one outside is not."""
    import asyncio
    import logging
    from types import SimpleNamespace

    from jupyterhub_gpulab.courses.hubhook import make_pre_spawn_hook
    from jupyterhub_gpulab.ledger.ledger import close_shared_ledgers

    url = f"sqlite:///{tmp_path / 'l.sqlite'}"
    led = Ledger(url)
    store = CourseStore(led.engine)
    root = tmp_path / "courses"
    store.declare([parse_course({"slug": "ok101", "shared_folder": str(root / "ok101")}),
                   parse_course({"slug": "bad101", "shared_folder": "/etc"})])  # fmt: skip
    from jupyterhub_gpulab.courses.config import GPULabCourses

    settings = GPULabCourses(course_volume="c-{slug}", shared_folder_root=str(root))
    hook = make_pre_spawn_hook(url, settings)

    def spawner(name):
        user = SimpleNamespace(name="ann", groups=[SimpleNamespace(name=name)], admin=False)
        return SimpleNamespace(name=name, user=user, user_options={}, volumes={}, cmd=None,
                               log=logging.getLogger("t"), _log_name=name)  # fmt: skip

    try:
        good, bad = spawner("ok101"), spawner("bad101")
        asyncio.run(hook(good))
        asyncio.run(hook(bad))
        assert str(root / "ok101") in good.volumes
        assert bad.volumes == {"gpulab-coursework-bad101--ann": "/home/jovyan"}  # its work only
    finally:
        close_shared_ledgers()
        led.close()


def test_a_course_created_a_moment_ago_is_a_course_server_at_its_first_start(tmp_path):
    """Pre-start begins within the service's 2-s look after a course is created: the hub's
    hook, whose last read of the ledger predates the course, must still start it as the
    course's server (its command pulls the content; its home is the course work), never as a
    plain named server on the personal home (CI at 27759fe: 'dl201/intro.py' absent)."""
    import asyncio
    import logging
    from types import SimpleNamespace

    from jupyterhub_gpulab.courses.config import GPULabCourses
    from jupyterhub_gpulab.courses.hubhook import make_pre_spawn_hook
    from jupyterhub_gpulab.ledger.ledger import close_shared_ledgers

    url = f"sqlite:///{tmp_path / 'l.sqlite'}"
    led = Ledger(url)
    store = CourseStore(led.engine)
    store.declare([parse_course({"slug": "old101"})])
    hook = make_pre_spawn_hook(url, GPULabCourses())

    def spawner(name):
        user = SimpleNamespace(name="ann", groups=[SimpleNamespace(name=name)], admin=False)
        return SimpleNamespace(name=name, user=user, user_options={}, cmd=None,
                               volumes={"gpulab-home-ann": "/home/jovyan"},
                               log=logging.getLogger("t"), _log_name=name)  # fmt: skip

    try:
        asyncio.run(hook(spawner("old101")))  # the hook has read the ledger now
        content = [{"repo": "https://git.example.edu/dl201.git", "dir": "dl201"}]
        store.put(parse_course({"slug": "dl201", "content": content}), by="admin")
        new = spawner("dl201")
        asyncio.run(hook(new))
        assert new.cmd is not None and "gitpuller" in new.cmd[2]
        assert new.volumes == {"gpulab-coursework-dl201--ann": "/home/jovyan"}
    finally:
        close_shared_ledgers()
        led.close()


def test_course_servers_are_outside_the_named_server_limit(tmp_path):
    """A student whose stopped personal servers fill ``named_server_limit_per_user`` (JupyterHub
    counts stopped records too) was refused their course server by Start all ("already has the
    maximum of 3 named servers"); and course servers must not use up the personal allowance."""
    import asyncio
    from types import SimpleNamespace

    from jupyterhub_gpulab.courses.hubhook import make_server_limit
    from jupyterhub_gpulab.ledger.ledger import close_shared_ledgers

    url = f"sqlite:///{tmp_path / 'l.sqlite'}"
    led = Ledger(url)
    store = CourseStore(led.engine)
    store.declare([parse_course({"slug": "dl101"})])
    ann = SimpleNamespace(orm_spawners={"": 0, "a": 0, "b": 0, "c": 0})

    def asks(limit, user: str, server: str | None) -> int:
        path_args = [user, server] if server is not None else [user]
        handler = SimpleNamespace(path_args=path_args, find_user={"ann": ann}.get)
        return asyncio.run(limit(handler))

    try:
        limit = make_server_limit(url, 3)
        assert asks(limit, "ann", "dl101") == 0  # a course's server: no limit applies
        assert asks(limit, "ann", "d") == 3  # three personal servers: the fourth is refused
        ann.orm_spawners["dl101"] = 0
        assert asks(limit, "ann", "d") == 4  # the course server does not use one up
        store.put(parse_course({"slug": "ml202"}), by="admin")  # a moment ago: still known
        assert asks(limit, "ann", "ml202") == 0

        async def by_handler(handler):  # JupyterHub's other form: an awaitable callable
            return 2

        assert asks(make_server_limit(url, by_handler), "ann", "e") == 3
        assert asks(make_server_limit(url, 0), "ann", "dl101") == 0  # 0: no limit at all
    finally:
        close_shared_ledgers()
        led.close()
