# cython: language_level=3
"""The body extraction of the APIs outside ``extract_rules.HOT_APIS`` (``_generated/extract_plans_cold.pxi``),
built apart from ``_extract.pyx`` and with less optimisation: most of the generated code, little of any
capture's traffic. Its functions share ``_extract``'s runtime (``_extract.pxd``) and go into the same dispatch
table when ``_extract`` imports this module; nothing else imports it.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

from dissectors.kafka._extract cimport (
    Acc,
    Entry,
    fail,
    new_entry,
    new_partition_entry,
    nothing,
    partition_rows,
    rd_uuid,
    read_str,
    read_topic_list,
    set_plan,
    skip_sized,
    skip_tag_buffer,
)
from dissectors.kafka._wire cimport (
    MALFORMED,
    TRUNCATED,
    Cursor,
    rd_f64,
    rd_i16,
    rd_i32,
    rd_i64,
    rd_u8,
    rd_uvarint_wide,
)

from dissectors.kafka.extract_rules import MAX_ERROR_ROWS, MAX_PARTITION_ROWS, ErrorEntry, PartitionEntry

cdef bytes ZERO_UUID = bytes(16)

include "_generated/extract_plans_cold.pxi"

fill_cold_plans()
