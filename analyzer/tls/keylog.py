"""The NSS key log (``SSLKEYLOGFILE``, RFC 9850): session secrets by client random.

Each line is ``LABEL <client_random hex> <secret hex>``: ``CLIENT_RANDOM`` carries a TLS 1.2 master secret,
the ``*_TRAFFIC_SECRET*`` labels TLS 1.3 traffic secrets. The secrets never leave this object: its ``repr``
and ``str`` say how many sessions it holds, nothing more, so an options object that holds it can be logged.
"""

from __future__ import annotations

import os

# The labels a decryptor uses (others, such as EXPORTER_SECRET, are read and dropped).
CLIENT_RANDOM = "CLIENT_RANDOM"  # TLS 1.2 (and earlier): the 48-byte master secret
CLIENT_HANDSHAKE = "CLIENT_HANDSHAKE_TRAFFIC_SECRET"
SERVER_HANDSHAKE = "SERVER_HANDSHAKE_TRAFFIC_SECRET"
CLIENT_TRAFFIC_0 = "CLIENT_TRAFFIC_SECRET_0"
SERVER_TRAFFIC_0 = "SERVER_TRAFFIC_SECRET_0"
LABELS = frozenset((CLIENT_RANDOM, CLIENT_HANDSHAKE, SERVER_HANDSHAKE, CLIENT_TRAFFIC_0, SERVER_TRAFFIC_0))

MAX_KEYLOG_BYTES = 256 * 1024 * 1024  # a key log larger than this is refused (some 1.5 M TLS 1.3 sessions)
MAX_SECRET_BYTES = 64  # SHA-384's output: the largest secret a supported suite uses


class KeyLogError(ValueError):
    """The key log cannot be read (missing, unreadable, too large): said in words a person can act on."""


class KeyLog:
    """Session secrets by client random (32 bytes) and label. Malformed lines are counted and skipped: a key
    log is appended to by several processes at once and may end mid-line."""

    __slots__ = ("_secrets", "lines", "malformed")

    def __init__(self) -> None:
        self._secrets: dict[bytes, dict[str, bytes]] = {}
        self.lines = 0  # lines with a label this class uses
        self.malformed = 0

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> KeyLog:
        try:
            size = os.path.getsize(path)
            if size > MAX_KEYLOG_BYTES:
                raise KeyLogError(f"{os.fspath(path)}: {size:,} bytes, more than a key log may be "
                                  f"({MAX_KEYLOG_BYTES:,})")
            with open(path, "rb") as f:
                data = f.read(MAX_KEYLOG_BYTES + 1)
        except OSError as exc:
            raise KeyLogError(f"{os.fspath(path)}: {exc.strerror or exc}") from None
        log = cls()
        log.add(data)
        return log

    def add(self, data: bytes | str) -> int:
        """Read key log text (a file's, or a pcapng Decryption Secrets Block's); returns the lines taken."""
        if isinstance(data, str):
            data = data.encode("ascii", "replace")
        taken = 0
        for line in data.splitlines():
            parts = line.split()
            if len(parts) != 3 or line.startswith(b"#"):
                if parts and not line.startswith(b"#"):
                    self.malformed += 1
                continue
            label = parts[0].decode("ascii", "replace")
            if label not in LABELS:
                continue
            try:
                random = bytes.fromhex(parts[1].decode("ascii"))
                secret = bytes.fromhex(parts[2].decode("ascii"))
            except (ValueError, UnicodeDecodeError):
                self.malformed += 1
                continue
            if len(random) != 32 or not 0 < len(secret) <= MAX_SECRET_BYTES:
                self.malformed += 1
                continue
            self._secrets.setdefault(random, {})[label] = secret
            taken += 1
        self.lines += taken
        return taken

    def secrets(self, client_random: bytes) -> dict[str, bytes] | None:
        """The secrets logged for a session (label -> secret), or None."""
        return self._secrets.get(client_random)

    def merged(self, other: KeyLog | None) -> KeyLog:
        """A key log with this one's sessions and ``other``'s (a run's and a capture file's own)."""
        out = KeyLog()
        for src in (self, other):
            if src is not None:
                for random, labels in src._secrets.items():
                    out._secrets.setdefault(random, {}).update(labels)
                out.lines += src.lines
                out.malformed += src.malformed
        return out

    def __len__(self) -> int:
        return len(self._secrets)

    def __bool__(self) -> bool:
        return True  # an empty key log is still a key log (its absence is None)

    def __repr__(self) -> str:
        return f"KeyLog({len(self._secrets)} sessions)"

    __str__ = __repr__

    def __reduce__(self):
        # Pickled for worker processes and Spark executors as its text form, never through repr.
        return (_from_lines, (self._lines(),))

    def _lines(self) -> bytes:
        return b"\n".join(f"{label} {random.hex()} {secret.hex()}".encode()
                          for random, labels in self._secrets.items() for label, secret in labels.items())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeyLog) and self._secrets == other._secrets

    def __hash__(self) -> int:
        return hash(len(self._secrets))


def read_keylog(path: str | os.PathLike) -> KeyLog:
    """The key log in a file (``KeyLogError`` when it cannot be read, or holds no session secret)."""
    log = KeyLog.from_file(path)
    if not len(log):
        raise KeyLogError(f"{os.fspath(path)}: no TLS session secret in it (lines like CLIENT_RANDOM or "
                          "CLIENT_TRAFFIC_SECRET_0 followed by two hex strings)")
    return log


def _from_lines(data: bytes) -> KeyLog:
    log = KeyLog()
    log.add(data)
    return log
