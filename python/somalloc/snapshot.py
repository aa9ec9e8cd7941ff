"""A somalloc trace as a PyTorch memory snapshot.

somalloc records a run's allocations and frees with ``trace:PATH`` in its
configuration (see ``docs/memory_history.md`` in the repository). This
module converts such a trace into the snapshot format of PyTorch's memory
visualizer: the pickle that ``torch.cuda.memory._dump_snapshot()`` writes,
which https://pytorch.org/memory_viz and ``torch.cuda._memory_viz`` read::

    import somalloc.torch
    somalloc.torch.trace_to_snapshot("run.trace", "run.pickle")

or from a shell, ``python3 -m somalloc.snapshot run.trace run.pickle``. It
needs neither PyTorch nor a GPU. An RMM log converts first with
``somalloc-trace convert log.csv -o run.trace``.

What the snapshot holds:

* ``device_traces``: one list per device of the trace's events in time
  order: an allocation is ``alloc``, a free ``free_requested`` followed at
  once by ``free_completed`` (somalloc's frees are stream-ordered: the
  block is reused in the order of its stream, so there is no separate
  completion to show), a refused allocation ``oom`` (its ``device_free`` is
  0: the trace does not record the device's free memory). Each has the
  address, the bytes asked for, the stream's handle, the time in
  microseconds (since the Unix epoch where the trace says when it started)
  and, where the trace was recorded with ``trace_backtraces:on``, the
  allocation's native backtrace as ``frames`` (a free carries its
  allocation's). Markers (flush, trim, capture begin and end) have no
  counterpart and are left out.
* ``segments``: the address ranges the run's allocations covered, each
  rounded out to 2 MiB and merged where they touch, with the allocations
  still live at the end of the trace as ``active_allocated`` blocks and the
  rest ``inactive``. A segment appears in the device's trace
  (``segment_alloc``) at the first allocation in it and stays to the end; one
  that holds a free of an allocation made before the trace began is there
  from the start. These are not the pool's own reservations, which the
  trace does not record: ``somalloc.stats()`` and the trace's
  ``pool_reserved_peak`` figure give those.
* ``somalloc``: the trace's meta records and what the conversion left out.

The sizes are the bytes asked for (PyTorch's snapshots show its rounded
block sizes as ``size`` and the asked bytes as ``requested_size``; here both
are the asked bytes).
"""

import bisect
import pickle
import re
import sys

__all__ = ["read_trace", "to_snapshot", "trace_to_snapshot"]

MAGIC = b"somalloc-trace/"
VERSION = 1
GRANULE = 2 << 20

TAG_META, TAG_THREAD, TAG_STREAM, TAG_BACKTRACE, TAG_EVENT, TAG_DEVICE_TIME, TAG_DROPPED, TAG_END = range(1, 9)
ALLOCATE, FREE, FAILED_ALLOCATE = 1, 2, 3
ACTIONS = {1: "allocate", 2: "free", 3: "failed allocate", 4: "flush", 5: "trim", 6: "capture begin", 7: "capture end"}


class TraceError(ValueError):
    """A file that is not a somalloc trace this reader reads."""


def _varint(b, pos, end):
    v = 0
    shift = 0
    while True:
        if pos >= end:
            raise TraceError("a number runs past its record")
        x = b[pos]
        pos += 1
        v |= (x & 0x7F) << shift
        if x < 0x80:
            return v, pos
        shift += 7
        if shift > 63:
            raise TraceError("a number longer than 64 bits")


def _unzigzag(v):
    return (v >> 1) ^ -(v & 1)


def _string(b, pos, end):
    n, pos = _varint(b, pos, end)
    if pos + n > end:
        raise TraceError("a string runs past its record")
    return b[pos : pos + n].decode("utf-8", "replace"), pos + n


def read_trace(path):
    """Reads a somalloc trace (format version 1) as a dict: ``meta`` (a list
    of ``(key, value)``), ``streams`` (index -> ``(device, handle)``),
    ``backtraces`` (index -> text), ``events`` (tuples ``(t_ns, action,
    thread, device, stream, bytes, addr, backtrace)`` in time order, the
    events of one thread in their order; ``stream`` and ``backtrace`` are
    indices or None), ``dropped`` and ``complete``. A file cut short is read
    up to the cut, as somalloc's own reader does."""
    with open(path, "rb") as f:
        b = f.read()
    if not b.startswith(MAGIC):
        raise TraceError("%s is not a somalloc trace (it does not start with %r)" % (path, MAGIC.decode()))
    nl = b.find(b"\n")
    if nl < 0:
        raise TraceError("%s: no header line" % path)
    try:
        version = int(b[len(MAGIC) : nl].decode().strip())
    except ValueError:
        raise TraceError("%s: a header without a version number" % path) from None
    if version != VERSION:
        raise TraceError("%s: version %d; this reader reads version %d" % (path, version, VERSION))
    meta, streams, backtraces, events = [], {}, {}, []
    dropped, end_counts = 0, None
    last_t = last_addr = 0
    pos, n = nl + 1, len(b)
    mask = (1 << 64) - 1
    while pos < n:
        tag = b[pos]
        try:
            length, body = _varint(b, pos + 1, n)
        except TraceError:
            break  # a record cut short at the end: what came before stands
        end = body + length
        if end > n:
            break
        pos = end
        if tag == TAG_META:
            k, p = _string(b, body, end)
            v, _ = _string(b, p, end)
            meta.append((k, v))
        elif tag == TAG_STREAM:
            i, p = _varint(b, body, end)
            dev, p = _varint(b, p, end)
            handle, _ = _varint(b, p, end)
            streams[i] = (dev, handle)
        elif tag == TAG_BACKTRACE:
            i, p = _varint(b, body, end)
            text, _ = _string(b, p, end)
            backtraces[i] = text
        elif tag == TAG_EVENT:
            action = b[body]
            if action not in ACTIONS:
                raise TraceError("%s: unknown action %d at byte %d" % (path, action, body))
            thread, p = _varint(b, body + 1, end)
            dt, p = _varint(b, p, end)
            dev, p = _varint(b, p, end)
            stream, p = _varint(b, p, end)
            nbytes, p = _varint(b, p, end)
            da, p = _varint(b, p, end)
            bt = 0
            if p < end:
                bt, p = _varint(b, p, end)
            t = (last_t + _unzigzag(dt)) & mask
            addr = (last_addr + _unzigzag(da)) & mask
            last_t, last_addr = t, addr
            events.append((t, action, thread, dev, stream - 1 if stream else None, nbytes, addr, bt - 1 if bt else None))
        elif tag == TAG_DROPPED:
            _, p = _varint(b, body, end)
            c, _ = _varint(b, p, end)
            dropped += c
        elif tag == TAG_END:
            c, p = _varint(b, body, end)
            d, _ = _varint(b, p, end)
            end_counts = (c, d)
        # thread names, device times and records of later versions: not needed
    if end_counts is not None:
        if end_counts[0] != len(events):
            raise TraceError("%s: the end record counts %d events, the file holds %d" % (path, end_counts[0], len(events)))
        dropped = max(dropped, end_counts[1])
    events.sort(key=lambda e: e[0])  # stable: each thread keeps its order
    return {
        "meta": meta,
        "streams": streams,
        "backtraces": backtraces,
        "events": events,
        "dropped": dropped,
        "complete": end_counts is not None,
    }


_FRAME = re.compile(r"^\s*(\d+): (.*)$")
_AT = re.compile(r"^\s*at (.*?):(\d+)(?::\d+)?\s*$")


def _frames(text):
    """A Rust backtrace's text as PyTorch's frames (innermost first, as
    PyTorch lists them): ``{"name", "filename", "line"}``."""
    frames = []
    for line in text.splitlines():
        m = _FRAME.match(line)
        if m:
            frames.append({"name": m.group(2).strip(), "filename": "??", "line": 0})
            continue
        m = _AT.match(line)
        if m and frames:
            frames[-1]["filename"] = m.group(1)
            frames[-1]["line"] = int(m.group(2))
    return frames


def _merge(intervals, granule):
    """Intervals ``(start, end)`` rounded out to ``granule`` and merged where
    they overlap or touch, in address order."""
    out = []
    for s, e in sorted((s - s % granule, -(-e // granule) * granule) for s, e in intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def to_snapshot(trace, granule=GRANULE):
    """The snapshot dict of a trace that :func:`read_trace` read."""
    meta = dict(trace["meta"])
    streams = trace["streams"]
    start_ns = None
    try:
        start_ns = int(meta["start_unix_ns"])
    except (KeyError, ValueError):
        pass
    frames_of = {}

    def frames(bt):
        if bt is None:
            return []
        f = frames_of.get(bt)
        if f is None:
            f = frames_of[bt] = _frames(trace["backtraces"].get(bt, ""))
        return f

    def handle(stream):
        return 0 if stream is None else int(streams.get(stream, (0, 0))[1])

    def time_us(t):
        return ((start_ns or 0) + t) // 1000

    events = trace["events"]
    # Pass 1: the live set over time, to find the address ranges used and
    # the frees of allocations made before the trace began.
    live = {}
    ranges = {}
    early = {}  # device -> addresses freed without an allocation in the trace
    unmatched = 0
    for _, action, _, dev, _, nbytes, addr, _ in events:
        if action == ALLOCATE and addr and nbytes:
            live[(dev, addr)] = nbytes
            ranges.setdefault(dev, []).append((addr, addr + nbytes))
        elif action == FREE and addr:
            if live.pop((dev, addr), None) is None:
                unmatched += 1
                early.setdefault(dev, []).append(addr)
                ranges.setdefault(dev, []).append((addr, addr + max(nbytes, 1)))
    segs = {dev: _merge(r, granule) for dev, r in ranges.items()}
    starts = {dev: [s for s, _ in sl] for dev, sl in segs.items()}

    def segment_of(dev, addr):
        i = bisect.bisect_right(starts[dev], addr) - 1
        return i

    # A segment that holds a free of an allocation made before the trace
    # began was there from the start: no segment_alloc for it.
    opened = {dev: set() for dev in segs}
    for dev, addrs in early.items():
        for a in addrs:
            opened[dev].add(segment_of(dev, a))
    ndev = max([e[3] for e in events if e[1] in (ALLOCATE, FREE, FAILED_ALLOCATE)] + [-1]) + 1
    device_traces = [[] for _ in range(max(ndev, 1))]
    live = {}
    skipped = {}
    for t, action, _, dev, stream, nbytes, addr, bt in events:
        if action == ALLOCATE:
            if not addr or not nbytes:
                continue
            out = device_traces[dev]
            i = segment_of(dev, addr)
            if i not in opened[dev]:
                opened[dev].add(i)
                s, e = segs[dev][i]
                out.append({"action": "segment_alloc", "addr": s, "size": e - s, "stream": handle(stream), "time_us": time_us(t), "frames": []})
            fr = frames(bt)
            live[(dev, addr)] = (nbytes, fr)
            out.append({"action": "alloc", "addr": addr, "size": nbytes, "stream": handle(stream), "time_us": time_us(t), "frames": fr})
        elif action == FREE:
            if not addr:
                continue
            _, fr = live.pop((dev, addr), (nbytes, []))
            for name in ("free_requested", "free_completed"):
                device_traces[dev].append({"action": name, "addr": addr, "size": nbytes, "stream": handle(stream), "time_us": time_us(t), "frames": fr})
        elif action == FAILED_ALLOCATE:
            device_traces[dev].append({"action": "oom", "device_free": 0, "size": nbytes, "stream": handle(stream), "time_us": time_us(t), "frames": frames(bt)})
        else:
            skipped[ACTIONS[action]] = skipped.get(ACTIONS[action], 0) + 1
    # The segments at the end: the live allocations as blocks, gaps inactive.
    by_dev = {}
    for (dev, addr), (nbytes, fr) in live.items():
        by_dev.setdefault(dev, []).append((addr, nbytes, fr))
    segments = []
    for dev in sorted(segs):
        blocks_here = sorted(by_dev.get(dev, []), key=lambda x: x[0])
        j = 0
        for s, e in segs[dev]:
            blocks, cursor, active = [], s, 0
            while j < len(blocks_here) and blocks_here[j][0] < e:
                addr, nbytes, fr = blocks_here[j]
                j += 1
                if addr < cursor:
                    continue  # overlaps the block before it: not drawn
                if addr > cursor:
                    blocks.append({"address": cursor, "size": addr - cursor, "requested_size": 0, "state": "inactive", "frames": []})
                blocks.append({"address": addr, "size": nbytes, "requested_size": nbytes, "state": "active_allocated", "frames": fr})
                active += nbytes
                cursor = addr + nbytes
            if cursor < e:
                blocks.append({"address": cursor, "size": e - cursor, "requested_size": 0, "state": "inactive", "frames": []})
            segments.append(
                {
                    "device": dev,
                    "address": s,
                    "total_size": e - s,
                    "allocated_size": active,
                    "active_size": active,
                    "requested_size": active,
                    "stream": 0,
                    "segment_type": "large",
                    "segment_pool_id": (0, 0),
                    "is_expandable": False,
                    "frames": [],
                    "blocks": blocks,
                }
            )
    return {
        "segments": segments,
        "device_traces": device_traces,
        "somalloc": {
            "meta": meta,
            "dropped_events": trace["dropped"],
            "complete": trace["complete"],
            "frees_without_allocation": unmatched,
            "markers_left_out": skipped,
            "segment_granule": granule,
        },
    }


def trace_to_snapshot(trace_path, out_path=None):
    """Converts the somalloc trace at ``trace_path`` into a PyTorch memory
    snapshot (see the module's docs) and returns it as a dict; with
    ``out_path``, also writes it there as a pickle (protocol 4, which
    PyTorch's visualizer reads), for https://pytorch.org/memory_viz or
    ``python -m torch.cuda._memory_viz trace_plot out.pickle -o out.html``.
    Raises ``ValueError`` (``TraceError``) for a file that is not a trace."""
    snap = to_snapshot(read_trace(trace_path))
    if out_path is not None:
        with open(out_path, "wb") as f:
            pickle.dump(snap, f, protocol=4)
    return snap


def _main(argv):
    if len(argv) != 3 or argv[1].startswith("-"):
        print("usage: python3 -m somalloc.snapshot TRACE OUT.pickle", file=sys.stderr)
        return 2
    snap = trace_to_snapshot(argv[1], argv[2])
    n = sum(len(t) for t in snap["device_traces"])
    print("%s: %d trace entries on %d device(s), %d segment(s)" % (argv[2], n, len(snap["device_traces"]), len(snap["segments"])))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
