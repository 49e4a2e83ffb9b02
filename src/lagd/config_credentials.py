"""Where the replica password comes from, and the checks that keep it private.

The configuration only names a source (a systemd credential, a file, an
environment variable); the password itself is read when the daemon asks
(at start and on reload), so it never sits in the settings object, its
repr, or ``/status``, and a changed file is picked up by a reload.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from lagd.errors import LagdError


class CredentialError(LagdError):
    """The configured password source cannot be used (missing, unreadable, too open)."""


def resolve_password(*, credential: str, file: str, env_var: str, environ: Mapping[str, str]) -> str:
    """The password, from the first configured source: credential, file, variable.

    A configured credential or file that cannot be read is an error rather
    than a fall-through: silently trying the next source would connect with
    the wrong (often empty) password and report an access-denied error that
    points nowhere near the real problem.
    """
    if credential:
        return _read_credential(credential, environ)
    if file:
        return read_password_file(Path(file))
    if env_var:
        return environ.get(env_var, "")
    return ""


def check_password_source(*, credential: str, file: str, env_var: str, environ: Mapping[str, str]) -> None:
    """Raise what :func:`resolve_password` would, without keeping the password.

    A credential can only be checked inside the service: outside it systemd
    has not set $CREDENTIALS_DIRECTORY, which is not a mistake there.
    """
    if credential and "CREDENTIALS_DIRECTORY" not in environ:
        return
    resolve_password(credential=credential, file=file, env_var=env_var, environ=environ)


def password_source(*, credential: str, file: str, env_var: str) -> str:
    """Where the password will come from, in words (for summaries and /status)."""
    if credential:
        return f"systemd credential {credential}"
    if file:
        return f"file {file}"
    if env_var:
        return f"environment variable {env_var} (empty when unset)"
    return "none (empty password)"


def read_password_file(path: Path) -> str:
    """The file's text without its trailing newline; refuses group/other access.

    The mode is checked on the open descriptor, so the file checked is the file read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise CredentialError(
            f"replica.password_file: {path} does not exist",
            f"create it with the password on one line and `chmod 600 {path}`, or clear replica.password_file",
        ) from None
    except PermissionError:
        raise CredentialError(
            f"replica.password_file: {path} is not readable by this user",
            f"make the user lagd runs as its owner (`chown lagd: {path}`), "
            "or use password_credential with LoadCredential=, which systemd reads as root",
        ) from None
    except OSError as e:
        raise CredentialError(
            f"replica.password_file: cannot open {path}: {e.strerror}",
            "point replica.password_file at a regular file",
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CredentialError(
                f"replica.password_file: {path} is not a regular file",
                "point replica.password_file at a file holding the password",
            )
        if st.st_mode & 0o077:
            raise CredentialError(
                f"replica.password_file: {path} is readable or writable by group or others "
                f"(mode {stat.S_IMODE(st.st_mode):04o})",
                f"run `chmod 600 {path}`",
            )
        with open(fd, "rb", closefd=False) as f:
            data = f.read()
    finally:
        os.close(fd)
    return _decode(data, f"replica.password_file: {path}")


def _read_credential(name: str, environ: Mapping[str, str]) -> str:
    directory = environ.get("CREDENTIALS_DIRECTORY")
    if not directory:
        raise CredentialError(
            f'replica.password_credential is "{name}" but $CREDENTIALS_DIRECTORY is not set '
            "(lagd is not running under systemd with LoadCredential=)",
            f"start lagd from its unit with LoadCredential={name}:/etc/lagd/password, "
            "or use replica.password_file outside systemd",
        )
    path = Path(directory) / name
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CredentialError(
            f'replica.password_credential: systemd passed no credential named "{name}"',
            f"add LoadCredential={name}:/etc/lagd/password to the unit "
            "(the name must match) and restart lagd",
        ) from None
    except OSError as e:
        raise CredentialError(
            f'replica.password_credential: cannot read credential "{name}": {e.strerror}',
            "check the LoadCredential= line of the unit and restart lagd",
        ) from None
    return _decode(data, f'replica.password_credential "{name}"')


def _decode(data: bytes, where: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CredentialError(
            f"{where}: the password is not UTF-8 text", "store the password as UTF-8 text"
        ) from None
    # `echo secret > file` adds a newline that is not part of the password.
    return text.rstrip("\r\n")
