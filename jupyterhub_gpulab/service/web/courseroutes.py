"""The course pages' routes: the list, one course, and its actions (POST forms), for the
service's application (:mod:`..app`)."""

from __future__ import annotations

from .courseactions import CourseActionPage
from .coursepages import CoursePage, CoursesPage

__all__ = ["course_pages"]


def course_pages(prefix: str) -> list[tuple]:
    slug = r"(?P<slug>[a-z][a-z0-9-]{1,39})"
    return [
        (prefix + "courses", CoursesPage),
        (prefix + "courses/" + slug, CoursePage),
        (prefix + "courses/" + slug + r"/actions/(?P<action>[a-z-]+)", CourseActionPage),
    ]
