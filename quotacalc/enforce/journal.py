"""The write-ahead journal of a proxy's requests, beside its usage records (docs/enforce.md, "A proxy killed").

A request's record is written once it is settled. A proxy SIGKILLed (or OOM-killed) writes nothing more: the
requests it had in flight, and a settlement that landed in the store in the instant before its record, would get no
record, so the tokens the engine served would be billed to no one and ``quotacalc fleet`` would never see that load.
The journal says, ahead of each step, what a record needs: one JSON line per event, appended with one ``write`` to a
file opened ``O_APPEND`` (no fsync: a killed process's writes are in the page cache; only the machine's own crash
loses them):

- ``admitted``: the request's ids, tenant, pool, prompt, its unit weights and what it holds;
- ``progress``: its dispatch, its first token, and its output tokens and lease as they grow: at each lease renewal, at
  least every ``lease_tokens`` tokens and at most a second apart while it streams (never a line a token);
- ``settling``: the whole record but the settlement's figures, and the units billed and streamed the settlement is
  sent with, written before the store is asked;
- ``done``: its record is written.

A line merges into its request's entry (keyed by its ``lease_key``), so the last line of each field wins. The journal
is rewritten with the entries still open when it grows past ``rotate_bytes``, so it stays the size of the requests in
flight.

At its start a proxy takes its journal, and every journal beside its records whose proxy is gone: each is held with an
exclusive ``flock`` by its live proxy (the kernel releases it when the process dies, SIGKILL included), so a journal
that can be locked is an orphan, and several proxies or workers sharing one records file never replay each other's.
An orphan's open entries are adopted (written into this proxy's journal, then the orphan removed) and settled: a
settlement already sent is sent again (the store applies it once and returns the figures that landed), a request cut
off is settled now with what its journal proves it received; then its record is written. One whose record the records
file already has (a kill between the record and its ``done`` line) is only closed: its settlement landed before it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

log = logging.getLogger("quotacalc.enforce")

#: The suffix of a journal beside its records file: ``usage.jsonl.journal``, then ``.1``, ``.2`` for further proxies.
JOURNAL_SUFFIX = ".journal"
#: The outcome of a request whose proxy was killed before it settled.
GATEWAY_LOST = "gateway_lost"
#: A streaming request's progress line is written at most this long after the tokens it proves arrived.
PROGRESS_EVERY_S = 1.0
#: The journal is rewritten with only its open entries past this size (a few thousand requests' lines).
ROTATE_BYTES = 1 << 20

#: One encoder for every line (json.dumps with options builds one a call).
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode

#: A field its entry's lines never said.
_UNSAID = object()
ADMITTED = "admitted"
PROGRESS = "progress"
SETTLING = "settling"
DONE = "done"


def rfc3339(epoch_s: float | None) -> str | None:
    """A record's time: RFC 3339 UTC to the millisecond (the records' format, so a record can be matched by it)."""
    if epoch_s is None:
        return None
    return dt.datetime.fromtimestamp(epoch_s, tz=dt.timezone.utc).isoformat(timespec="milliseconds")


class JournaledRequest(BaseModel):
    """One request as its journal lines say, merged: what its record needs, and, once it was settling, the units its
    settlement was sent with."""

    model_config = ConfigDict(extra="ignore")

    lease_key: str
    request_id: str
    tenant: str
    pool: str | None = None
    model: str | None = None
    #: Epoch seconds: its arrival, dispatch, first token, and (settling) its end; ``at`` is its last line's time.
    start: float
    dispatched: float | None = None
    first_token: float | None = None
    end: float | None = None
    at: float
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    max_tokens: int | None = None
    units_reserved: float = 0.0
    #: The prompt's units at admission (uncached) and W, the units of an output token.
    prompt_units: float = 0.0
    output_weight: float = 0.0
    streamed_units: float = 0.0
    streaming: bool = True
    unmetered: bool = False
    #: Set by the ``settling`` line: the outcome and the units the settlement was sent with.
    outcome: str | None = None
    billed: float | None = None
    streamed: float | None = None
    retry_after_s: int | None = None
    status: int | None = None
    #: The records file's size when it was settling: its record, if written, lies after it.
    records_at: int = 0

    def record(self, *, taken: float, debited: float, released: float, charged: float, forgiven: float) -> dict:
        """Its usage record (the gate's keys and order; times as epoch seconds, as the gate's records carry them)."""
        record: dict[str, Any] = {
            "request_id": self.request_id,
            "tenant": self.tenant,
            "pool": self.pool,
            "model": self.model,
            "start": self.start,
            "dispatched": self.dispatched,
            "first_token": self.first_token,
            "end": self.end if self.end is not None else self.at,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "output_tokens": self.output_tokens,
            "max_tokens": None if self.unmetered else self.max_tokens,
            "units_reserved": self.units_reserved,
            "units_taken": taken,
            "units_debited": debited,
            "units_released": released,
            "units_charged": charged,
            "units_forgiven": forgiven,
            "outcome": self.outcome,
            "retry_after_s": self.retry_after_s,
        }
        if self.unmetered:
            record["unmetered"] = True
        if self.status is not None:
            record["status"] = self.status
        return record


@dataclass
class _Open:
    """An entry in memory: what its lines said, merged."""

    fields: dict[str, Any]


@dataclass
class Journal:
    """This proxy's journal: appended to on each event, locked for the proxy's life."""

    path: Path
    records_path: Path
    fd: int
    rotate_bytes: int = ROTATE_BYTES
    open_entries: dict[str, _Open] = field(default_factory=dict)
    #: Bytes in the file now (since its last rotation), and appended over its life.
    written: int = 0
    appended: int = 0
    failed_writes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- the events ------------------------------------------------------------------------------------------------

    def admitted(self, fields: dict[str, Any], at: float) -> None:
        entry = _Open(dict(fields))
        self.open_entries[fields["lease_key"]] = entry
        self._write(entry, ADMITTED, fields, at)

    def progress(self, lease_key: str, at: float, update: dict[str, Any]) -> None:
        """A request's progress (its dispatch, first token, output tokens, holds). The caller says when one is due:
        a streaming request's at its first token, at each lease renewal, every ``lease_tokens`` tokens and at most
        ``PROGRESS_EVERY_S`` after tokens it has not noted, checked on each chunk with a few comparisons."""
        entry = self.open_entries.get(lease_key)
        if entry is not None:
            self._write(entry, PROGRESS, {"lease_key": lease_key, **update}, at)

    def settling(self, fields: dict[str, Any], at: float) -> None:
        """The settlement about to be sent (``fields``: the record but its figures, ``billed``, ``streamed``). The line
        carries only what its entry's lines did not say already (a shorter line is a cheaper write), whole where its
        admission was never journaled (an admission cancelled on its way)."""
        lease_key = fields["lease_key"]
        entry = self.open_entries.get(lease_key)
        if entry is None:
            entry = self.open_entries[lease_key] = _Open({})
        known = entry.fields
        update = {
            name: value
            for name, value in fields.items()
            if value is not None and (name == "lease_key" or known.get(name, _UNSAID) != value)
        }
        update["records_at"] = _size(self.records_path)
        self._write(entry, SETTLING, update, at)

    def finish(self, lease_key: str, at: float) -> None:
        """Its record is written: the entry is closed (a ``done`` line; a rotation leaves it out)."""
        entry = self.open_entries.pop(lease_key, None)
        if entry is None:
            return
        self._write(entry, DONE, {"lease_key": lease_key}, at)
        if self.written > self.rotate_bytes:
            self.rotate()

    # -- the file --------------------------------------------------------------------------------------------------

    def _write(self, entry: _Open, event: str, update: dict[str, Any], at: float) -> None:
        entry.fields.update(update)
        entry.fields["at"] = at
        line = {"event": event, "at": at, **update}
        data = (_encode(line) + "\n").encode()
        with self._lock:
            try:
                os.write(self.fd, data)
            except OSError as error:  # a full disk must not stop the proxy: the record is still written at the end
                self.failed_writes += 1
                if self.failed_writes == 1 or self.failed_writes % 1000 == 0:
                    log.error("quotacalc: %s: journal write failed (%s): free disk space", self.path, error.strerror)
                return
            self.written += len(data)
            self.appended += len(data)

    def rotate(self) -> None:
        """Rewrite the journal with its open entries only (one merged line each), atomically: a new file, locked,
        renamed over the old; a proxy killed meanwhile leaves one or the other, whole."""
        with self._lock:
            lines = b"".join(
                (_encode({"event": "open", **entry.fields}) + "\n").encode() for entry in self.open_entries.values()
            )
            fresh = self.path.with_name(self.path.name + ".new")
            fd = -1
            try:
                fd = _create_locked(fresh)
                os.write(fd, lines)
                os.replace(fresh, self.path)
            except OSError as error:
                if fd >= 0:
                    os.close(fd)
                log.error("quotacalc: %s: journal rotation failed (%s): it grows on", self.path, error.strerror)
                return
            old, self.fd, self.written = self.fd, fd, len(lines)
            if old >= 0:
                os.close(old)

    def close(self) -> None:
        """The proxy stops: a journal with no open entry is removed, else kept for the next start to settle."""
        with self._lock:
            if not self.open_entries:
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


# -- taking the journals at start-up -----------------------------------------------------------------------------------


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _try_lock(path: Path) -> int | None:
    """The path opened and exclusively locked (non-blocking), or None where a live process holds it (or it went)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Locked, but the path may since name another file (its owner rotated it, or an adopter removed it).
        if os.stat(path).st_ino != os.fstat(fd).st_ino:
            raise BlockingIOError
    except OSError:
        os.close(fd)
        return None
    return fd


def _create_locked(path: Path) -> int:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a leftover of a rotation cut off: never a live journal (those carry no .new)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o640)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def _slots(records_path: Path) -> dict[int, Path]:
    """The journals beside a records file, by slot: ``NAME.journal`` is 0, ``NAME.journal.N`` is N."""
    pattern = re.compile(re.escape(records_path.name + JOURNAL_SUFFIX) + r"(?:\.(\d+))?")
    slots = {}
    with contextlib.suppress(OSError):
        for path in records_path.parent.iterdir():
            found = pattern.fullmatch(path.name)
            if found:
                slots[int(found.group(1) or 0)] = path
    return slots


def read_entries(path: Path, text: str) -> dict[str, dict[str, Any]]:
    """A journal's open entries: its lines merged per request (by ``lease_key``), those with a ``done`` line left out;
    a line that is not a JSON object with one (a line cut off by the kill, a corrupt one) is skipped with a warning
    naming the file and line."""
    entries: dict[str, dict[str, Any]] = {}
    done: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            update = json.loads(line)
        except ValueError:
            update = None
        if not isinstance(update, dict) or not isinstance(update.get("lease_key"), str):
            log.warning(
                "quotacalc: %s: line %d is not a journal line (cut off or corrupt): skipped; its request, if any, "
                "gets no record from this line",
                path,
                number,
            )
            continue
        if update.pop("event", None) == DONE:
            done.add(update["lease_key"])
        entries.setdefault(update["lease_key"], {}).update(update)
    return {lease_key: fields for lease_key, fields in entries.items() if lease_key not in done}


def _claim_new(base: Path, slots: dict[int, Path]) -> tuple[Path, int]:
    """A new journal in the first slot no file holds, created and locked; a slot another starting proxy took first (it
    created the file, or locked it first) is passed over."""
    slot = 0
    while True:
        if slot not in slots:
            path = base if slot == 0 else base.with_name(f"{base.name}.{slot}")
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o640)
            except FileExistsError:
                fd = -1
            if fd >= 0:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    if os.stat(path).st_ino == os.fstat(fd).st_ino:
                        return path, fd
                except OSError:
                    pass
                os.close(fd)
        slot += 1


def open_journal(records_path: Path) -> tuple[Journal, list[JournaledRequest]]:
    """This proxy's journal beside ``records_path``, and the open requests of every orphan journal there (their proxies
    died), adopted: written into this journal before the orphans are removed, so a proxy killed while it settles them
    finds them again."""
    base = records_path.with_name(records_path.name + JOURNAL_SUFFIX)
    slots = _slots(records_path)
    orphans: dict[int, int] = {}
    for slot, path in sorted(slots.items()):
        fd = _try_lock(path)
        if fd is not None:
            orphans[slot] = fd
    merged: dict[str, dict[str, Any]] = {}
    for slot, fd in orphans.items():
        with os.fdopen(os.dup(fd), "rb") as handle:
            handle.seek(0)
            text = handle.read().decode("utf-8", "replace")
        merged.update(read_entries(slots[slot], text))
    adopted: list[JournaledRequest] = []
    for lease_key, fields in merged.items():
        try:
            adopted.append(JournaledRequest.model_validate(fields))
        except ValidationError as error:
            first = error.errors()[0]
            log.warning(
                "quotacalc: %s: request %s: %s: %s in its journal lines: skipped (no record; its lease expires)",
                base,
                lease_key,
                ".".join(str(part) for part in first["loc"]),
                first["msg"],
            )
    if orphans:
        own = min(orphans)
        path, fd = slots[own], os.dup(orphans[own])
    else:
        own, (path, fd) = -1, _claim_new(base, slots)
    journal = Journal(path, records_path, fd=fd)
    for request in adopted:
        journal.open_entries[request.lease_key] = _Open(request.model_dump(exclude_none=True))
    if orphans:
        # The adopted entries, one line each, in a new file of this proxy's renamed over its slot (the orphan's lines
        # of requests already recorded dropped); the lock moves with it.
        journal.rotate()
    for slot, orphan_fd in orphans.items():
        if slot != own:
            # Emptied before removed: a proxy that opened it before and locks it after reads nothing.
            with contextlib.suppress(OSError):
                os.ftruncate(orphan_fd, 0)
                os.unlink(slots[slot])
        os.close(orphan_fd)
    return journal, adopted


def recorded(records_path: Path, requests: list[JournaledRequest]) -> set[str]:
    """The lease keys of settling ``requests`` whose record is already in the records file (written before the kill):
    matched by request id and start, in the part of the file written since the earliest of them was settling."""
    settling = [r for r in requests if r.outcome is not None]
    if not settling:
        return set()
    wanted = {(r.request_id, rfc3339(r.start)): r.lease_key for r in settling}
    found: set[str] = set()
    try:
        with records_path.open("rb") as handle:
            handle.seek(min(r.records_at for r in settling))
            for line in handle:
                try:
                    record = json.loads(line)
                    key = (record.get("request_id"), record.get("start"))
                except (ValueError, AttributeError):
                    continue
                if key in wanted:
                    found.add(wanted[key])
    except OSError:
        return found
    return found
