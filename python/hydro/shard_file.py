"""One rank's file of one tracked sharded object, laid out as a data file of torch.distributed.checkpoint
(DCP): each chunk of a tensor is one torch.save'd tensor, each other value its planner's bytes, one
after another; then the file's index, torch.save'd: where each chunk lies in its whole tensor and in
this file; then a trailer of the index's offset and length and MAGIC. The committing rank merges
every rank's index into DCP's .metadata (hydro.reshard.dcp_metadata), so that dcp.load reads a hydro
checkpoint as its own; hydro's resume reads the indexes. Everything loads with weights_only=True.

The index: {FORMAT: VERSION, "kind": how the state was taken, "tensors": {fqn: {"size", "dtype",
"chunks": [(offsets, sizes, span)]}}, "values": {fqn: span}, "mappings": DCP's planner_data}, where
a span is (offset, length) in the file and the fqns are DCP's for the state {tracked name: state}."""
import io
import struct
import sys

import torch

FORMAT = "hydro.reshardable"  # the index's key that marks a file of this kind, and its version
VERSION = 2
MAGIC = b"hydroDCP"
_TRAILER = struct.Struct("<QQ8s")  # the index's offset and length, MAGIC


class _Counted:
    """A writer that counts the bytes it passes on: each value's offset in the file."""

    def __init__(self, sink):
        self.sink, self.at = sink, 0

    def write(self, data):
        n = self.sink.write(data)
        self.at += n
        return n

    def flush(self):
        self.sink.flush()


def _own_cpu(t):
    """The chunk as DCP writes it: on the CPU, with a storage of its own bytes only (torch.save
    writes a view's whole storage, and a padded shard is a view), and here contiguous too, so that
    its stored bytes are the tensor's in order (read_into)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.untyped_storage().nbytes() != t.numel() * t.element_size() or not t.is_contiguous():
        t = t.contiguous().clone()
    return t


def write_value(out, value):
    """Appends one value as DCP lays it out, a tensor torch.save'd (_own_cpu) and bytes as they are,
    to `out` (a _Counted); returns its span."""
    start = out.at
    if isinstance(value, torch.Tensor):
        torch.save(_own_cpu(value), out)
    else:
        out.write(value)
    return start, out.at - start


def write(chunks, sink):
    """Writes hydro.reshard.to_chunks' output: its values, its index and the trailer."""
    out = _Counted(sink)
    spans = [write_value(out, value) for value in chunks["data"]]
    tensors = {fqn: {"size": whole["size"], "dtype": whole["dtype"],
                     "chunks": [(offsets, sizes, spans[i]) for offsets, sizes, i in whole["chunks"]]}
               for fqn, whole in chunks["tensors"].items()}
    index = {FORMAT: VERSION, "kind": chunks["kind"], "tensors": tensors,
             "values": {fqn: spans[i] for fqn, i in chunks["values"].items()}, "mappings": chunks["mappings"]}
    start = out.at
    torch.save(index, out)
    out.write(_TRAILER.pack(start, out.at - start, MAGIC))


def read_index(f, path):
    """The index of the open file `f` (named `path` in errors); None for a file without the trailer
    (hydro's first format: one torch.save of everything)."""
    size = f.seek(0, io.SEEK_END)
    if size < _TRAILER.size:
        return None
    f.seek(size - _TRAILER.size)
    start, length, magic = _TRAILER.unpack(f.read(_TRAILER.size))
    if magic != MAGIC:
        return None
    if start + length + _TRAILER.size != size:
        raise ValueError(f"{path}: the index of a {FORMAT} file lies outside it")
    index = torch.load(io.BytesIO(_read_span(f, (start, length), path)), map_location="cpu", weights_only=True)
    if not isinstance(index, dict) or index.get(FORMAT) != VERSION:
        raise ValueError(f"{path}: not a rank's sharded state of {FORMAT} version {VERSION}")
    return index


def _read_span(f, span, path):
    start, length = span
    f.seek(start)
    data = f.read(length)
    if len(data) != length:
        raise _past_end(span, path)
    return data


def _past_end(span, path):
    return ValueError(f"{path}: {span[1]} bytes at {span[0]} run past the file's end")


class _Span(io.RawIOBase):
    """The bytes at `span` of an open file, as a file of their own: torch.load reads each record
    through readinto() straight into its tensor's memory, as DCP's reader does (no copy between)."""

    def __init__(self, f, span):
        super().__init__()
        self._f, (self._start, self._length), self._at = f, span, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._at

    def seek(self, offset, whence=io.SEEK_SET):
        self._at = offset + {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self._length}[whence]
        return self._at

    def readinto(self, buffer):
        n = max(0, min(len(buffer), self._length - self._at))
        self._f.seek(self._start + self._at)
        got = self._f.readinto(memoryview(buffer).cast("B")[:n]) if n else 0
        self._at += got
        return got


def read_tensor(f, span, path):
    """The chunk stored at `span`, as DCP's reader loads it."""
    if span[0] + span[1] > f.seek(0, io.SEEK_END):
        raise _past_end(span, path)
    return torch.load(_Span(f, span), map_location="cpu", weights_only=True)


def read_into(f, span, target):
    """Reads the whole chunk at `span` straight into `target`, a contiguous CPU tensor of its dtype
    and shape, with no copy between: the bytes of the one storage record of the chunk's torch.save
    are the tensor's (write() stores chunks contiguous in storages of their own), in this machine's
    byte order. False, having read nothing into it, where that does not hold."""
    if not target.is_contiguous() or target.device.type != "cpu" or sys.byteorder != "little":
        return False
    nbytes = target.numel() * target.element_size()
    try:
        records = torch._C.PyTorchFileReader(_Span(f, span))
        names = set(records.get_all_records())
        if names & {"data/0", "data/1"} != {"data/0"} or ("byteorder" in names and
                                                            bytes(records.get_record("byteorder")) != b"little"):
            return False
        at = records.get_record_offset("data/0")
    except (RuntimeError, AttributeError):  # not a zip torch reads, or a torch without these calls
        return False
    if nbytes == 0 or at + nbytes > span[1]:
        return False
    f.seek(span[0] + at)
    view = memoryview(target.reshape(-1).view(torch.uint8).numpy())  # any dtype's bytes (numpy has no bfloat16)
    return f.readinto(view) == nbytes


def read_bytes(f, span, path):
    """A value's bytes (its planner's torch.save of it)."""
    return _read_span(f, span, path)
