"""What Python sees of the compiled column tables (analyzer/tables/_columns.pyx); the session layer's matcher
writes rows through their C ``add`` methods, which Python does not see."""

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

class Table:
    rows: int
    names: tuple[str, ...]
    is_full: bool
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[dict[str, Any]]: ...
    def clear(self) -> None: ...
    def drain(self, resolve: Callable[[bytes], str]) -> dict[str, pa.Array | list[int | None]]: ...
    def append(self, row: dict[str, Any]) -> None: ...
    def row(self, i: int) -> dict[str, Any]: ...
    def column(self, name: str, start: int = 0) -> list[Any]: ...

class ExchangeColumns(Table):
    def __init__(self) -> None: ...

class ErrorColumns(Table):
    def __init__(self) -> None: ...

class PartitionColumns(Table):
    def __init__(self) -> None: ...

class Endpoints:
    connection_id: int
    client_ip: str
    client_port: int
    broker_ip: str
    broker_port: int
    def __init__(self, connection_id: int, client_ip: str, client_port: int, broker_ip: str,
                 broker_port: int) -> None: ...
