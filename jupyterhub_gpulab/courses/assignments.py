"""The service's side of a course's assignments, mixed into :class:`.manager.CourseManager`:
collect (:func:`.collect.collect`) and return (:func:`.collect.give_back`) run for the whole
roster through the lab's course storage (the manager's ``backend``), each audited with its
per-student report.

Runs in the gpulab service's event loop; the copies block, so each action runs in one thread
(``aio.call``).
"""

from __future__ import annotations

from ..ledger import aio
from .collect import collect, give_back
from .coursenode import first_node
from .model import Course
from .roster import roster_of


class UndeclaredAssignment(ValueError):
    """Collect or return named an assignment its course does not declare."""


def check_declared(course: Course, assignment: str, action: str) -> None:
    """Refuse (:class:`UndeclaredAssignment`, naming the declared ones) an ``assignment`` that
    ``course`` does not declare, when it declares any: a typo would otherwise "collect" an empty
    folder from everyone and report the whole class missing. A course that declares none takes
    any folder name under ``~/assignments`` (free-form, as the instructor guide says)."""
    names = [a.name for a in course.assignments]
    if names and assignment not in names:
        done = "collected" if action == "collect" else "returned"
        raise UndeclaredAssignment(
            f"{course.slug} declares no assignment {assignment!r}; its assignments are "
            f"{', '.join(names)}. Nothing was {done}."
        )


class AssignmentActions:
    """Needs of the class it is mixed into: ``hub``, ``store``, ``settings``, ``images`` and
    ``backend`` (the engine seam, :mod:`jupyterhub_gpulab.backends`)."""

    def _files(self, course: Course, students=()):
        """The lab's course storage (blocking); on a Swarm a staff folder made now is made beside
        the course work of the first of ``students`` with some (:func:`.coursenode.first_node`)."""
        image = (
            self.settings.helper_image
            or self.images.get(course.profile)
            or next(iter(self.images.values()), "")
        )
        files = self.backend.storage(image)
        works = [self.settings.work_of(course.slug, u) for u in sorted(students)]
        near = first_node(files, works) if works else None
        return self.backend.storage(image, near=near) if near else files

    async def collect(self, course: Course, assignment: str, *, by: str) -> dict:
        """Collect ``assignment`` from every roster member (:func:`.collect.collect`)."""
        return await self._copy_assignment(collect, "collect", course, assignment, by)

    async def give_back(self, course: Course, assignment: str, *, by: str) -> dict:
        """Return feedback on ``assignment`` to every roster member (:func:`.collect.give_back`)."""
        return await self._copy_assignment(give_back, "return", course, assignment, by)

    async def _copy_assignment(self, copy, action: str, course: Course, assignment: str, by: str):
        """Run ``copy`` (collect or give_back) for the roster, audit it as ``action``; the
        per-student report; :class:`UndeclaredAssignment` before anything is copied."""
        check_declared(course, assignment, action)
        students = await roster_of(self.hub, course)
        s = self.settings
        extra = {"owner": tuple(s.staff_owner)} if action == "collect" else {}

        def run():  # in a thread: finding a staff folder's node asks the engines
            return copy(
                self._files(course, students if action == "collect" else ()),
                assignment=assignment,
                students=students,
                volume_of=lambda user: s.work_of(course.slug, user),
                course_volume=s.staff_of(course.slug),
                max_bytes=course.collect_max_bytes,
                **extra,
            )

        report = await aio.call(run)
        detail = {"assignment": assignment, "report": report}
        await aio.call(self.store.record, course.slug, by, action, detail)
        return report
