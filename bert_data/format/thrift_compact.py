"""Apache Thrift's compact protocol, the encoding of Parquet's page headers and footer.

Parquet frames its pages and describes its file in Thrift structs (``parquet.thrift``). The
Parquet shards this package writes are made of pages the workers encode
(:mod:`bert_data.format.parquet`), so their page headers and footer are written here; the
reader is for the tests (a footer read back, field by field).

A struct is a list of :class:`Field` (id, compact type, value) in id order; a list is a
:class:`ThriftList` (element type, values); binary values are ``bytes``, integers ``int``.
Only what Parquet's structs use is here: no maps of structs, no doubles, no sets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)
INTEGER_TYPES = (BYTE, I16, I32, I64)


class ThriftError(ValueError):
    """Bytes that are not a compact-protocol struct of the kinds read here."""


@dataclass(frozen=True)
class ThriftList:
    element_type: int
    values: tuple


@dataclass(frozen=True)
class Field:
    id: int
    type: int
    value: object


Struct = List[Field]
Value = Union[int, bool, bytes, "ThriftList", Struct]


def _varint(value: int, out: bytearray) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _write_value(kind: int, value: Value, out: bytearray) -> None:
    if kind in (TRUE, FALSE):  # a bool inside a list: one byte
        out.append(TRUE if value else FALSE)
    elif kind in INTEGER_TYPES:
        if kind == BYTE:
            out.append(value & 0xFF)
        else:
            _varint(_zigzag(int(value)), out)
    elif kind == BINARY:
        _varint(len(value), out)
        out += value
    elif kind == LIST:
        _write_list(value, out)
    elif kind == STRUCT:
        write_struct(value, out)
    else:
        raise ThriftError(f"compact type {kind} is not written here")


def _write_list(value: ThriftList, out: bytearray) -> None:
    size = len(value.values)
    if size < 15:
        out.append((size << 4) | value.element_type)
    else:
        out.append(0xF0 | value.element_type)
        _varint(size, out)
    for item in value.values:
        _write_value(value.element_type, item, out)


def write_struct(fields: Sequence[Field], out: Optional[bytearray] = None) -> bytearray:
    """``fields`` (ids ascending) as a compact struct, appended to ``out``."""
    out = bytearray() if out is None else out
    last = 0
    for item in fields:
        kind = item.type
        if kind in (TRUE, FALSE):
            kind = TRUE if item.value else FALSE
        delta = item.id - last
        if 0 < delta <= 15:
            out.append((delta << 4) | kind)
        else:
            out.append(kind)
            _varint(_zigzag(item.id), out)
        last = item.id
        if kind not in (TRUE, FALSE):
            _write_value(kind, item.value, out)
    out.append(STOP)
    return out


def encode(fields: Sequence[Field]) -> bytes:
    return bytes(write_struct(fields))


class _Reader:
    def __init__(self, data: bytes, position: int = 0) -> None:
        self.data = memoryview(data)
        self.position = position

    def byte(self) -> int:
        if self.position >= len(self.data):
            raise ThriftError("compact struct cut short")
        value = self.data[self.position]
        self.position += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            byte = self.byte()
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise ThriftError("compact varint too long")

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def value(self, kind: int) -> Value:
        if kind in (TRUE, FALSE):  # inside a list
            return self.byte() == TRUE
        if kind == BYTE:
            byte = self.byte()
            return byte - 256 if byte > 127 else byte
        if kind in (I16, I32, I64):
            return self.zigzag()
        if kind == DOUBLE:
            end = self.position + 8
            raw, self.position = bytes(self.data[self.position:end]), end
            return raw
        if kind == BINARY:
            size = self.varint()
            end = self.position + size
            if end > len(self.data):
                raise ThriftError("compact binary cut short")
            raw, self.position = bytes(self.data[self.position:end]), end
            return raw
        if kind in (LIST, SET):
            header = self.byte()
            size, element = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            return ThriftList(element, tuple(self.value(element) for _ in range(size)))
        if kind == STRUCT:
            return self.struct()
        raise ThriftError(f"compact type {kind} is not read here")

    def struct(self) -> Struct:
        fields: Struct = []
        last = 0
        while True:
            header = self.byte()
            if header == STOP:
                return fields
            kind, delta = header & 0x0F, header >> 4
            field_id = last + delta if delta else self.zigzag()
            last = field_id
            value: Value = kind == TRUE if kind in (TRUE, FALSE) else self.value(kind)
            fields.append(Field(field_id, kind, value))


def decode(data: bytes, position: int = 0) -> Tuple[Struct, int]:
    """The compact struct at ``position`` of ``data``, and the position after it."""
    reader = _Reader(data, position)
    return reader.struct(), reader.position


def get(fields: Struct, field_id: int, default: object = None) -> object:
    """The value of field ``field_id`` of a decoded struct (``default`` when absent)."""
    for item in fields:
        if item.id == field_id:
            return item.value
    return default
