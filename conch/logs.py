"""Where errors are written: ``CONCH_HOME/logs/errors.log``, readable by its owner only.

A traceback can hold a path, a chat's words or part of a request, so the file
is made 0600 whatever the umask, and an older file is narrowed when opened.
"""

from __future__ import annotations

import os
from logging.handlers import RotatingFileHandler

FILE_MODE = 0o600


class PrivateRotatingFileHandler(RotatingFileHandler):
    """A RotatingFileHandler whose every file, rolled-over ones included, is 0600."""

    def _open(self):
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)  # a file made before, or by something else, narrowed
            return open(fd, self.mode, encoding=self.encoding, errors=self.errors)  # noqa: SIM115
        except BaseException:
            os.close(fd)
            raise
