"""The errors the package raises: every one is a :class:`VramscopeError`, so that
``except vramscope.VramscopeError`` catches whatever vramscope refused or could not do, and each
is also the built-in error it was before (``RuntimeError``, ``ValueError``, ``FileExistsError``),
so that code catching those goes on working.

=========================  ==============================================  =================
error                      raised when                                     also a
=========================  ==============================================  =================
``VramscopeError``         the ``vramscope`` command refused or failed     ``RuntimeError``
                           (``exit_status`` says how), or a recording
                           cannot be made as asked
``VramscopeNotFound``      the ``vramscope`` command cannot be found       ``RuntimeError``
``VramscopeUsageError``    an argument is not one vramscope can use (a     ``ValueError``
                           size it cannot read, an unknown source)
``VramscopeFileExists``    a file would be replaced without ``force``      ``FileExistsError``
=========================  ==============================================  =================
"""

from __future__ import annotations

__all__ = ["VramscopeError", "VramscopeFileExists", "VramscopeNotFound", "VramscopeUsageError"]


class VramscopeError(RuntimeError):
    """vramscope refused or failed; ``str(error)`` says why (the command's own message, when
    the ``vramscope`` command failed).

    Attributes:
        exit_status: the ``vramscope`` command's exit status when it was the command that
            failed (2 for a file it cannot read or bad arguments); ``None`` when no command ran
            or it did not get to exit (it could not be found or started).
        stderr: everything the command wrote to its standard error (``""`` when none ran).

    >>> try:  # doctest: +SKIP
    ...     vramscope.summary("missing.vtrace")
    ... except vramscope.VramscopeError as error:
    ...     print(error.exit_status, error)
    2 cannot read missing.vtrace: No such file or directory (os error 2)
    """

    def __init__(self, message: str, exit_status: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.exit_status = exit_status
        self.stderr = stderr

    @property
    def returncode(self) -> int | None:
        """The exit status under its earlier name (``exit_status``)."""
        return self.exit_status


class VramscopeNotFound(VramscopeError):
    """The ``vramscope`` command that goes with this package cannot be found (``exit_status``
    is ``None``)."""


class VramscopeUsageError(VramscopeError, ValueError):
    """An argument vramscope cannot use: a size it cannot read, a source it does not know."""


class VramscopeFileExists(VramscopeError, FileExistsError):
    """A file vramscope would write exists, and replacing it was not asked for."""
