"""TLS alerts (RFC 8446 section 6, RFC 5246 section 7.2): what a peer said before it gave up on a connection.

A fatal alert in clear (a handshake failure, an unknown CA, a decode_error for a client speaking plaintext to
a TLS listener) is often the only trace of why a client could not connect; alerts inside protected records
are read once the connection is decrypted.
"""

from __future__ import annotations

from typing import NamedTuple

WARNING, FATAL = 1, 2
CLOSE_NOTIFY = 0
MAX_ALERTS = 4  # kept per connection; more are counted

ALERT_NAMES = {
    0: "close_notify", 10: "unexpected_message", 20: "bad_record_mac", 21: "decryption_failed",
    22: "record_overflow", 30: "decompression_failure", 40: "handshake_failure", 41: "no_certificate",
    42: "bad_certificate", 43: "unsupported_certificate", 44: "certificate_revoked", 45: "certificate_expired",
    46: "certificate_unknown", 47: "illegal_parameter", 48: "unknown_ca", 49: "access_denied", 50: "decode_error",
    51: "decrypt_error", 60: "export_restriction", 70: "protocol_version", 71: "insufficient_security",
    80: "internal_error", 86: "inappropriate_fallback", 90: "user_canceled", 100: "no_renegotiation",
    109: "missing_extension", 110: "unsupported_extension", 111: "certificate_unobtainable",
    112: "unrecognized_name", 113: "bad_certificate_status_response", 114: "bad_certificate_hash_value",
    115: "unknown_psk_identity", 116: "certificate_required", 120: "no_application_protocol",
}


class Alert(NamedTuple):
    frame: int
    from_client: bool
    level: int
    description: int

    @property
    def text(self) -> str:
        level = {WARNING: "warning", FATAL: "fatal"}.get(self.level, f"level {self.level}")
        name = ALERT_NAMES.get(self.description, f"alert {self.description}")
        return f"{level} {name} from the {'client' if self.from_client else 'broker'} (packet {self.frame})"

    @property
    def is_problem(self) -> bool:
        """Anything but the orderly close (a warning close_notify)."""
        return not (self.description == CLOSE_NOTIFY and self.level != FATAL)


def alerts_text(alerts: list[Alert], more: int) -> str | None:
    """The connections table's tls_alerts: each alert in order, and how many more were not kept."""
    if not alerts:
        return None
    return "; ".join(a.text for a in alerts) + (f"; and {more:,} more" if more else "")
