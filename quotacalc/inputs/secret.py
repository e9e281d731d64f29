"""The salt secret: from ``--salt-secret-file`` or ``QUOTACALC_SALT_SECRET``; never in the plan.

No error message here ever contains the secret or any part of it.
"""

from __future__ import annotations

import os

from quotacalc.errors import SALT_SECRET_ENV, QuotacalcError, UsageError

SECRET_ENV = SALT_SECRET_ENV
#: The shortest secret accepted. Each salt is an HMAC of a public tenant name, and the manifest meant to be committed
#: holds the digests of the files the salts are in: a short secret can be searched for offline.
MIN_SECRET_BYTES = 16
#: A secret is tens of bytes; a file far larger is the wrong file.
MAX_SECRET_BYTES = 65_536


def short_secret_problem(secret: bytes) -> str | None:
    """Why ``secret`` is too short to keep salts (None when it is long enough)."""
    if len(secret) >= MIN_SECRET_BYTES:
        return None
    return (
        f"is {len(secret)} bytes, shorter than {MIN_SECRET_BYTES}: the salts could be guessed offline from the "
        "committed manifest"
    )


def require_strong_secret(secret: bytes, secret_file: str | None) -> bytes:
    """``secret``, refused where it is too short to write salts with (a new secret changes every salt: choose a
    long one before the first generate)."""
    problem = short_secret_problem(secret)
    if problem is not None:
        raise QuotacalcError(
            problem,
            source=secret_file,
            field="--salt-secret-file" if secret_file is not None else SECRET_ENV,
            fix="use a random secret (e.g. openssl rand -hex 32)",
        )
    return secret


def open_secret_file_problem(secret_file: str | None) -> str | None:
    """Why ``secret_file`` is not private to its owner, as ssh judges a key (any permission for group or others),
    or None: whoever can read it can derive every tenant's salt, and so read or poison its prefix cache."""
    if secret_file is None:
        return None
    try:
        mode = os.stat(secret_file).st_mode & 0o777
    except (OSError, ValueError):
        return None  # load_salt_secret says what is wrong with the path
    if not mode & 0o077:
        return None
    who = " and ".join(name for name, bits in (("its group", 0o070), ("others", 0o007)) if mode & bits)
    return f"is open to {who} (mode {mode:04o}): whoever can read it can derive every tenant's salt"


def load_salt_secret(secret_file: str | None) -> bytes | None:
    """The secret's bytes (a file's trailing newline dropped), or None when neither source gives one."""
    if secret_file is not None:
        from quotacalc.fileio import read_regular_bytes

        try:
            data = read_regular_bytes(secret_file, what="salt secret", limit=MAX_SECRET_BYTES)
        except UsageError as error:
            raise UsageError(error.problem, source=secret_file, field="--salt-secret-file", fix=error.fix) from None
        data = data.rstrip(b"\r\n")
        if not data:
            raise QuotacalcError("is empty", source=secret_file, field="--salt-secret-file", fix="put the secret in it")
        if not data.strip():
            raise QuotacalcError(
                "holds only whitespace: anyone could derive the salts",
                source=secret_file,
                field="--salt-secret-file",
                fix="put a random secret in it (e.g. openssl rand -hex 32)",
            )
        return data
    value = os.environ.get(SECRET_ENV)
    if value is not None and value and not value.strip():
        raise QuotacalcError(
            "holds only whitespace: anyone could derive the salts",
            field=SECRET_ENV,
            fix="set a random secret (e.g. openssl rand -hex 32)",
        )
    return value.encode("utf-8") if value else None
