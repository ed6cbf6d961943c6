"""The analysis options, and the one declaration of the command-line options that set them.

``ANALYSIS_OPTIONS`` says, once, every option of the commands that analyse captures (``kafkacap export``,
``summary``, ``exchanges``, ``show``, ``report``, ``live``, ``spark``) and of the Spark job
(``spark_jobs.export_job``): its flags, the name its value is parsed into, its type, range and default, its help,
and which field of ``Options`` it sets and how. The parsers are made from it (click's by
``analyzer.cli.options``, argparse's by ``spark_jobs.export_job.add_to_argparse``), and ``options_from`` turns
the values they parsed, by name, into ``Options``.

Nothing here imports more than the standard library when the module is loaded (the framer's sizes are read
when an ``Options`` is made): the command line reads the declaration to print its help, and ``--help`` loads
no analysis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from analyzer.tls.keylog import KeyLog

# Frame bytes kept with --headers-only: a request header (client_id, and a Produce request's transactional_id
# before its acks) and the top of a response fit many times over, and most heads then lie in the packet that
# starts the frame (a head collected over several packets costs as much as the rest of the frame's visits).
HEADERS_ONLY_KEEP = 1024


DEFAULT_PORTS = (9092,)
"""Kafka's port when none is given (every command, the Spark job and live)."""


def _max_frame() -> int:
    from dissectors.kafka.framing import DEFAULT_MAX_FRAME

    return DEFAULT_MAX_FRAME


@dataclass(frozen=True)
class Options:
    ports: tuple[int, ...] = DEFAULT_PORTS
    detect_ports: bool = False
    keep: int | None = None  # frame bytes kept for decoding: whole frames up to DEFAULT_KEEP, or heads only
    max_frame: int = field(default_factory=_max_frame)  # dissectors.kafka.framing.DEFAULT_MAX_FRAME
    batch_rows: int = 1 << 14  # rows (as Python tuples) held before they become Arrow batches
    bodies: bool = True  # decode request/response bodies (topics, partitions, nested errors)
    verify_crc: bool = False  # check the CRC of every record batch
    records: bool = False  # one row per record (the records table)
    deliveries: bool = False  # the deliveries table (end-to-end latency, analyzer.derived.deliveries)
    max_batch_mb: int = 64  # decompressed size a single batch may reach before it is refused
    max_decompressed_mb: int = 4096  # decompressed bytes per capture file, all batches together
    stitch: bool = True  # the files of a rotated set (tcpdump -C/-G) make one capture (analyzer.pipeline.stitch)
    # Memory-mapped pcaps read in chunks, runs of ordinary packets handled in bulk (analyzer.tcp.bulk); False:
    # packet by packet, the reference the bulk path is tested against.
    bulk: bool = True
    # TLS session secrets to decrypt TLS connections with (--tls-keylog; a pcapng's own Decryption Secrets
    # Blocks are added per file). Its repr names no secret.
    tls_keys: KeyLog | None = None

    @property
    def frame_keep(self) -> int:
        if self.keep is not None:
            return self.keep
        from dissectors.kafka.framing import DEFAULT_KEEP

        return DEFAULT_KEEP if self.bodies else HEADERS_ONLY_KEEP


def _as_given(value: object) -> object:
    return value


def _negated(value: object) -> bool:
    return not value


def _ports(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(value) or DEFAULT_PORTS


def _key_log(path: str) -> KeyLog:
    """Read while the command line is parsed, so that a file that cannot be read is refused with it (KeyLogError
    is a ValueError)."""
    from analyzer.tls.keylog import read_keylog

    return read_keylog(path)


@dataclass(frozen=True)
class OptionSpec:
    """One command-line option of the analysing commands and the Spark job, and the ``Options`` field it sets."""

    name: str  # what its value is parsed into: click's parameter name, argparse's dest, options_from's key
    flags: tuple[str, ...]  # "-p", "--port"
    help: str  # one text for every parser; a command may add a sentence of its own (analyzer.cli.options)
    field: str  # the Options field it sets ...
    to_field: Callable[[object], object] = _as_given  # ... to this of the parsed value
    # "flag": a switch, False unless given; "int": a whole number from low to high (None: unbounded);
    # "file": the path of a file, turned into its value by ``read`` as the command line is parsed.
    kind: Literal["flag", "int", "file"] = "flag"
    default: object = False
    low: int | None = None
    high: int | None = None
    repeatable: bool = False  # given any number of times: its values, in order (none: an empty tuple)
    metavar: str | None = None
    read: Callable[[str], object] | None = None  # text -> value; a ValueError refuses the command line


ANALYSIS_OPTIONS: list[OptionSpec] = [
    OptionSpec("ports", ("-p", "--port"), field="ports", to_field=_ports, kind="int", default=(), low=1, high=65535,
               repeatable=True,
               help=f"Kafka broker port (repeatable). Default: {', '.join(map(str, DEFAULT_PORTS))}."),
    OptionSpec("detect_ports", ("--detect-ports",), field="detect_ports",
               help="Also find Kafka on any other port, by the shape of its request headers."),
    OptionSpec("headers_only", ("--headers-only",), field="bodies", to_field=_negated,
               help="Decode headers and top-level errors only: no topics, partitions or nested errors (about twice "
                    "as fast on large captures)."),
    OptionSpec("verify_crc", ("--verify-crc",), field="verify_crc",
               help="Check every record batch's CRC (counted per partition)."),
    OptionSpec("records", ("--records",), field="records",
               help="Also a records table: one row per record (offset, timestamp, key/value sizes, header keys, "
                    "trace header). Slower."),
    OptionSpec("deliveries", ("--deliveries",), field="deliveries",
               help="Also end-to-end latency, produce to fetch: the deliveries table (one row per produced batch and "
                    "consumer that fetched it) and its summary lines. Slower."),
    OptionSpec("max_batch_mb", ("--max-batch-mb",), field="max_batch_mb", kind="int", default=Options.max_batch_mb,
               low=1, help="A compressed batch that would expand beyond this is reported, not expanded."),
    OptionSpec("max_decompressed_mb", ("--max-decompressed-mb",), field="max_decompressed_mb", kind="int",
               default=Options.max_decompressed_mb, low=1, help="Decompression budget per capture file."),
    OptionSpec("separate_files", ("--separate-files",), field="stitch", to_field=_negated,
               help="Analyse every file on its own, even the files of a rotated set (tcpdump -C/-G), which are "
                    "otherwise stitched into one capture."),
    OptionSpec("tls_keylog", ("--tls-keylog",), field="tls_keys", kind="file", default=None, metavar="FILE",
               read=_key_log,
               help="Decrypt TLS connections with the session secrets of this NSS key log (SSLKEYLOGFILE). Key logs "
                    "inside a pcapng (Decryption Secrets Blocks) are used without it."),
]
"""Every analysing option, in the order the commands' help lists them."""


def analysis_specs(names: Iterable[str] = ()) -> list[OptionSpec]:
    """The declared options named (in the declaration's order), or all of them when none is named."""
    wanted = set(names)
    known = {spec.name for spec in ANALYSIS_OPTIONS}
    if wanted - known:
        raise KeyError(f"not an analysing option: {', '.join(sorted(wanted - known))}")
    return [spec for spec in ANALYSIS_OPTIONS if not wanted or spec.name in wanted]


def options_from(values: Mapping[str, object], **more: object) -> Options:
    """``Options`` as the parsed values of the declared options say them, read by name (other names are passed
    over; an option not among them leaves its field as it is by default). ``more``: fields set directly."""
    fields = {spec.field: spec.to_field(values[spec.name]) for spec in ANALYSIS_OPTIONS if spec.name in values}
    return Options(**fields, **more)
