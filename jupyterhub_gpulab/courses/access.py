"""Which of a course's profiles its roster may use, by the lab's one rule
(:func:`~..lab.profiles.entitled_in`): pure, no I/O.

A course's servers start with its profile for every roster member; a profile the roster's
group may not pick would be refused at every student's start. So a course is checked, when it
is saved, as a member of its roster group alone would be (their other groups are not known
here: a student whose other groups open the profile would be served, but the course must not
rely on that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lab.policy import PolicyContext
from ..lab.profiles import entitled_in

if TYPE_CHECKING:
    from ..lab.config import Lab
    from .model import Course

__all__ = ["roster_may_use", "roster_profile_problems"]


def roster_may_use(group: str, lab: Lab) -> tuple[str, ...]:
    """Slugs of the profiles a non-admin member of ``group`` alone may pick, in config order."""
    ctx = PolicyContext.for_user({group}, False, lab)
    return tuple(p.slug for p in entitled_in(lab.profiles, ctx))


def roster_profile_problems(course: Course, lab: Lab) -> list[str]:
    """One message per profile of ``course`` its roster group may not use, naming the profile,
    the groups it is for (those of the profile and of the lab's policies whose members may pick
    it) and what the roster may pick; ``[]`` when every one is usable. Profiles the lab lacks
    are left to :func:`~.parse.parse_course`."""
    allowed = roster_may_use(course.roster_group, lab)
    known = {p.slug: p for p in lab.profiles}
    problems = []
    for slug in course.profiles:
        if slug in allowed or slug not in known:
            continue
        candidates = sorted(set(known[slug].groups) | set(lab.policies))
        for_groups = [g for g in candidates if slug in roster_may_use(g, lab)]
        problems.append(
            f"profile {slug!r} is not open to the roster group {course.roster_group!r}: it is for "
            f"{'group(s) ' + ', '.join(for_groups) if for_groups else 'no group'} "
            f"(c.GPULab.group_policies and the profile's groups); the roster may use "
            f"{', '.join(allowed) or 'no profile'}"
        )
    return problems
