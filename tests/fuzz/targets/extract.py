"""The body extractor: the bytes after three selector bytes (api key, version, flags: response, partial,
memoryview) as one body.

Documented error: :class:`dissectors.kafka.decoder.DecodeError` (DecodeTruncated for bodies that run past
their end, unless ``partial``). Beyond not raising: checked against the full decoder, its reference, a body the
decoder reads is read by the (compiled) extractor too, with the same non-zero error codes at the same places.
"""

from __future__ import annotations

from collections import Counter

from dissectors.kafka.decoder import DecodeError, decode
from dissectors.kafka.extract import extract

ALLOWED = (DecodeError,)


def errors_in_tree(value, path: str, out: Counter) -> None:
    """Every non-zero error code of a decoded tree by dotted field path (no indices), as extract names them."""
    if isinstance(value, list):
        for item in value:
            errors_in_tree(item, path, out)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key == "_unknown_tags":  # tag number -> size
                continue
            here = f"{path}.{key}" if path else key
            if (key == "error_code" or key.endswith("_error_code")) and isinstance(item, int):
                if item:
                    out[(here, item)] += 1
            else:
                errors_in_tree(item, here, out)


def outcome(body, api_key: int, api_version: int, is_response: bool, partial: bool):
    """(result, None) or (None, error class) of one extraction."""
    try:
        return extract(body, 0, len(body), api_key, api_version, is_response, partial=partial), None
    except ALLOWED as exc:
        return None, type(exc)


def test_one_input(data: bytes) -> None:
    if len(data) < 3:
        return
    api_key, api_version, flags = data[0] % 96, data[1] % 24, data[2]
    is_response, partial = bool(flags & 1), bool(flags & 2)
    body = memoryview(data)[3:] if flags & 4 else data[3:]
    found, _raised = outcome(body, api_key, api_version, is_response, partial)
    try:
        tree = decode(body, 0, len(body), api_key, api_version, is_response)
    except ALLOWED:
        return
    assert found is not None, "the decoder reads the body, the extractor does not"
    if is_response:
        expected: Counter = Counter()
        errors_in_tree(tree, "", expected)
        assert Counter((e.field_path, e.error_code) for e in found.errors) == expected, (found.errors, expected)
