# Types of the C extension txmq._codec_c (_codec.c): the signatures of txmq._codec_py,
# which is the reference for its behaviour.
from txmq._codec_py import Fields, Readable, Walked

def verify(buf: Readable, pos: int, physical_offset: int, /) -> int: ...
def patch(
    frame: bytearray | memoryview,
    pos: int,
    queue_offset: int,
    physical_offset: int,
    born_host: Readable,
    store_timestamp_ms: int,
    store_host: Readable,
    /,
) -> None: ...
def fields(buf: Readable, pos: int, /) -> Fields: ...
def walk(buf: Readable, offset: int, segment_end: int, /) -> list[Walked]: ...
