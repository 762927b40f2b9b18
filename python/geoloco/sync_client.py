"""Trainer side of geoloco's local sync protocol, with the standard library
and numpy only, so any framework can be a site's inner trainer.

The site's daemon listens on a Unix socket per job. The client says HELLO
with the model's parameter layout, receives the job's shared-memory segment
(a memfd passed with SCM_RIGHTS) and maps it as one flat numpy float32 array,
so parameters never travel through the socket. Then, once per round (and
fragment):

    copy the replica into client.fragment_values(f)   # e.g. from torch
    client.sync(client.next_round(f), f, tokens, loss)
    result = client.wait_result()                     # the new anchor is in the segment
    copy client.fragment_values(f) back into the model

Between sync() and its RESULT the daemon owns the fragment's values: do not
write them. With PyTorch, `torch.from_numpy(client.tensor(name))` views a
tensor of the segment without copying.

The wire format is inner/protocol/message.h's (the C++ side is the one
implementation of the daemon); this module encodes the trainer's messages
and decodes the daemon's, checking every length.

    layout = layout_of([(name, tuple(p.shape)) for name, p in model.named_parameters()])
    with SyncClient.connect("/var/lib/geoloco/jobs/JOB/sync.sock", "JOB", layout) as client:
        ...
"""

import array
import collections
import json
import math
import mmap
import os
import socket
import struct
import time
from typing import List, Optional, Sequence, Tuple

import numpy as np

MAGIC = b"GLS1"
VERSION = 1
HELLO, WELCOME, INIT, SYNC, RESULT, ERROR = 1, 2, 3, 4, 5, 6
TYPE_NAMES = {HELLO: "HELLO", WELCOME: "WELCOME", INIT: "INIT", SYNC: "SYNC", RESULT: "RESULT", ERROR: "ERROR"}
ALL_FRAGMENTS = 0xFFFFFFFF
DTYPE_F32 = 1
MAX_NAME_BYTES = 1024
MAX_RANK = 8
MAX_BODY_BYTES = 16 << 20
WELCOME_ANCHOR_READY = 1
WELCOME_PLAN = 2  # the job's phase plan follows the fragment table
RESULT_STOP = 1
ERROR_FATAL = 1
# geoloco::Err (common/status.h), by value.
ERR_NAMES = ["ok", "invalid_argument", "malformed", "truncated", "mismatch", "too_large",
             "unsupported", "non_finite", "io", "timeout", "internal"]

_HEADER = struct.Struct("<4sBBHI")
_SYNC = struct.Struct("<QIIQd")
_SYNC_TIMING = struct.Struct("<dd")
SYNC_TIMED = 1  # SYNC's flags: the trainer's compute and loop seconds follow the loss
_RESULT = struct.Struct("<QIIQ")
_ERROR_FIXED = struct.Struct("<BBBBIQ")
_WELCOME_FIXED = struct.Struct("<IQI")
_FRAGMENT = struct.Struct("<QQQ")
_PLAN = struct.Struct("<QdQQdIIQQ")

PhasePlan = collections.namedtuple(
    "PhasePlan", "sync_every sync_seconds min_steps overlap_steps alpha merge_delayed first_round stop_rounds")
PhasePlan.__doc__ = """The job's inner phases as its WELCOME says (inner/protocol/message.h):
sync_every H (0: time-based), sync_seconds per phase (0: step-based), min_steps
of a timed phase, overlap_steps τ, alpha α, merge_delayed, the job's
first_round, and stop_rounds (the job file's stop.rounds; 0: none)."""


def _decode_plan(body, at):
    if len(body) != at + _PLAN.size:
        raise SyncError("malformed" if len(body) > at + _PLAN.size else "truncated",
                        "WELCOME's phase plan is %d bytes, not %d" % (len(body) - at, _PLAN.size))
    every, seconds, min_steps, overlap, alpha, merge, reserved, first, stop = _PLAN.unpack_from(body, at)
    if merge > 1 or reserved != 0:
        raise SyncError("malformed", "WELCOME's phase plan has merge %d and reserved %d" % (merge, reserved))
    if not (math.isfinite(seconds) and seconds >= 0) or (every > 0) == (seconds > 0):
        raise SyncError("malformed", "WELCOME's phase plan needs exactly one of H (%d) and seconds (%r)"
                        % (every, seconds))
    if not 0 <= alpha <= 1 or min_steps < 1:
        raise SyncError("malformed", "WELCOME's phase plan has alpha %r and min steps %d" % (alpha, min_steps))
    return PhasePlan(every, seconds, min_steps, overlap, alpha, merge == 1, first, stop)

Tensor = collections.namedtuple("Tensor", "name shape offset")
Fragment = collections.namedtuple("Fragment", "offset length next_round")
Result = collections.namedtuple("Result", "round fragment next_round stop")


def job_state(socket_path: str) -> Optional[Tuple[str, str]]:
    """(state, message) of the job whose sync socket is `socket_path`, as its
    folder's status.json (written by geolocod next to the socket) says:
    state is starting, running, finished, failed, cancelled or stopped
    (geolocod shut down; it resumes the job when it starts again). None when
    the file cannot be read."""
    try:
        with open(os.path.join(os.path.dirname(socket_path), "status.json")) as f:
            status = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(status, dict) or not isinstance(status.get("state"), str):
        return None
    return status["state"], str(status.get("message", ""))


class SyncError(Exception):
    """A protocol failure. `code` is one of ERR_NAMES ("timeout", "io", ...)."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


class DaemonRefused(SyncError):
    """The daemon answered with ERROR. `fatal`: it closed the connection."""

    def __init__(self, code, message, fatal, refused, round, fragment):
        super().__init__(code, message)
        self.fatal = fatal
        self.refused = refused
        self.round = round
        self.fragment = fragment


def layout_of(named_shapes: Sequence[Tuple[str, Sequence[int]]]) -> List["Tensor"]:
    """[(name, shape), ...] -> [Tensor(name, shape, offset)], laid out
    contiguously in list order (the flat fp32 buffer the daemon expects)."""
    out, at = [], 0
    for name, shape in named_shapes:
        shape = tuple(int(d) for d in shape)
        out.append(Tensor(name, shape, at))
        at += int(np.prod(shape, dtype=np.int64)) if shape else 1
    return out


def layout_values(layout):
    if not layout:
        return 0
    last = layout[-1]
    return last.offset + (int(np.prod(last.shape, dtype=np.int64)) if last.shape else 1)


def _str(s):
    b = s.encode("utf-8")
    if len(b) > MAX_NAME_BYTES:
        raise ValueError("%r is %d bytes; at most %d are allowed" % (s[:40], len(b), MAX_NAME_BYTES))
    return struct.pack("<H", len(b)) + b


def _message(type_, body):
    return _HEADER.pack(MAGIC, VERSION, type_, 0, len(body)) + body


def encode_hello(job, layout):
    parts = [_str(job), struct.pack("<I", len(layout))]
    for t in layout:
        if len(t.shape) > MAX_RANK:
            raise ValueError("tensor %r has rank %d; at most %d is allowed" % (t.name, len(t.shape), MAX_RANK))
        parts.append(_str(t.name))
        parts.append(struct.pack("<BB", DTYPE_F32, len(t.shape)))
        parts.append(struct.pack("<%dQ" % len(t.shape), *t.shape))
        parts.append(struct.pack("<Q", t.offset))
    return _message(HELLO, b"".join(parts))


def encode_init():
    return _message(INIT, b"")


def encode_sync(round, fragment, tokens, loss, timing=None):
    """SYNC; `timing` = (compute seconds, loop seconds) since the previous
    SYNC, when the trainer measures them (the daemon shows their ratio)."""
    if timing is None:
        return _message(SYNC, _SYNC.pack(round, fragment, 0, tokens, float(loss)))
    compute, loop = (float(t) for t in timing)
    if not (0 <= compute < float("inf") and 0 <= loop < float("inf")):
        raise ValueError(f"SYNC's timing must be two finite non-negative seconds, not {timing!r}")
    return _message(SYNC, _SYNC.pack(round, fragment, SYNC_TIMED, tokens, float(loss)) +
                    _SYNC_TIMING.pack(compute, loop))


def decode_header(head):
    """-> (type, body length); raises SyncError like the C++ decode_header."""
    magic, version, type_, reserved, size = _HEADER.unpack(head)
    if magic != MAGIC:
        raise SyncError("malformed", "bad message magic %r: not a geoloco local sync message" % magic)
    if version != VERSION:
        raise SyncError("unsupported", "protocol version %d is not supported; this side speaks version %d"
                        % (version, VERSION))
    if reserved != 0 or type_ not in TYPE_NAMES:
        raise SyncError("malformed", "bad header (type %d, reserved %d)" % (type_, reserved))
    if size > MAX_BODY_BYTES:
        raise SyncError("too_large", "%s body of %d bytes is over the limit" % (TYPE_NAMES[type_], size))
    return type_, size


def decode_body(type_, body):
    """A daemon's message as a tuple ("WELCOME", flags, values, [Fragment], PhasePlan or None),
    ("RESULT", Result) or ("ERROR", DaemonRefused); every length is checked."""
    name = TYPE_NAMES[type_]

    def need(n, what):
        if len(body) < n:
            raise SyncError("truncated", "%s: body is %d bytes, %s needs %d" % (name, len(body), what, n))

    if type_ == WELCOME:
        need(_WELCOME_FIXED.size, "the fixed part")
        flags, values, count = _WELCOME_FIXED.unpack_from(body)
        need(_WELCOME_FIXED.size + count * _FRAGMENT.size, "the fragment table")
        frags = [Fragment(*_FRAGMENT.unpack_from(body, _WELCOME_FIXED.size + i * _FRAGMENT.size))
                 for i in range(count)]
        end = _WELCOME_FIXED.size + count * _FRAGMENT.size
        if flags & ~(WELCOME_ANCHOR_READY | WELCOME_PLAN):
            raise SyncError("malformed", "WELCOME has unknown flags %d" % flags)
        plan = _decode_plan(body, end) if flags & WELCOME_PLAN else None
        if plan is None and len(body) != end:
            raise SyncError("malformed", "WELCOME has %d bytes after its fragment table" % (len(body) - end))
        return ("WELCOME", flags, values, frags, plan)
    if type_ == RESULT:
        need(_RESULT.size, "RESULT")
        if len(body) != _RESULT.size:
            raise SyncError("malformed", "RESULT has %d bytes after its last field" % (len(body) - _RESULT.size))
        round_, fragment, flags, next_round = _RESULT.unpack(body)
        if flags & ~RESULT_STOP:
            raise SyncError("malformed", "RESULT has unknown flags %d" % flags)
        return ("RESULT", Result(round_, fragment, next_round, bool(flags & RESULT_STOP)))
    if type_ == ERROR:
        need(_ERROR_FIXED.size + 2, "the fixed part")
        code, flags, refused, _, fragment, round_ = _ERROR_FIXED.unpack_from(body)
        (n,) = struct.unpack_from("<H", body, _ERROR_FIXED.size)
        need(_ERROR_FIXED.size + 2 + n, "the reason")
        reason = body[_ERROR_FIXED.size + 2:_ERROR_FIXED.size + 2 + n].decode("utf-8", "replace")
        code_name = ERR_NAMES[code] if 0 < code < len(ERR_NAMES) else "internal"
        fatal = bool(flags & ERROR_FATAL)
        what = "daemon refused %s" % TYPE_NAMES[refused] if refused in TYPE_NAMES else "daemon error"
        if refused == SYNC:
            what += " (round %d, fragment %d)" % (round_, fragment)
        text = "%s: %s%s" % (what, reason, " [connection closed]" if fatal else "")
        return ("ERROR", DaemonRefused(code_name, text, fatal, refused, round_, fragment))
    raise SyncError("malformed", "the daemon sent %s, a trainer's message" % name)


class SyncClient:
    """One trainer's connection to its daemon; see the module docstring."""

    def __init__(self, sock, layout):
        self._sock = sock
        self._layout = layout
        self._by_name = {t.name: t for t in layout}
        self._inbox = bytearray()
        self._fds = []
        self._mm = None
        self.params = None
        self.fragments = []
        self.anchor_ready = False
        self.plan = None  # PhasePlan, when the daemon's WELCOME carried the job's
        self.stopped = False
        self._in_flight = []
        self._init_pending = False

    @classmethod
    def connect(cls, path: str, job: str, layout: List[Tensor], connect_timeout: float = 30.0,
                welcome_timeout: float = 600.0) -> "SyncClient":
        """Connects (retrying while the daemon is not listening yet), sends
        HELLO and maps the segment from WELCOME. Raises DaemonRefused with
        the daemon's reason, or SyncError (timeout, io, malformed)."""
        values = layout_values(layout)
        if values == 0:
            raise ValueError("the layout has no tensors")
        deadline = time.monotonic() + connect_timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError) as e:
                sock.close()
                if time.monotonic() >= deadline:
                    raise SyncError("timeout", "no daemon answered on %r within %.1f s (%s)"
                                    % (path, connect_timeout, e)) from None
                time.sleep(0.02)
        client = cls(sock, layout)
        try:
            try:
                sock.sendall(encode_hello(job, layout))
                sent = None
            except OSError as e:  # refused at once: its ERROR may still be readable
                sent = SyncError("io", "send: %s" % e)
            try:
                msg = client._receive(welcome_timeout if sent is None else 1.0)
            except SyncError:
                if sent is not None:
                    raise sent from None
                raise
            if msg[0] == "ERROR":
                raise msg[1]
            if msg[0] != "WELCOME":
                raise SyncError("malformed", "the daemon answered HELLO with %s" % msg[0])
            _, flags, seg_values, frags, plan = msg
            if seg_values != values:
                raise SyncError("mismatch", "WELCOME announces %d values; the layout has %d" % (seg_values, values))
            if sum(f.length for f in frags) != values or not frags:
                raise SyncError("malformed", "WELCOME's fragments do not cover the segment")
            if len(client._fds) != 1:
                raise SyncError("malformed", "WELCOME came with %d descriptors instead of 1" % len(client._fds))
            fd = client._fds.pop()
            try:
                size = os.fstat(fd).st_size
                if size != values * 4:
                    raise SyncError("mismatch", "the shared memory holds %d bytes, WELCOME announced %d"
                                    % (size, values * 4))
                client._mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)  # the mapping keeps the memory alive
            client.params = np.frombuffer(client._mm, dtype=np.float32, count=values)
            client.fragments = list(frags)
            client._in_flight = [False] * len(frags)
            client.anchor_ready = bool(flags & WELCOME_ANCHOR_READY)
            client.plan = plan
            return client
        except BaseException:
            client.close()
            raise

    # --- views of the segment -------------------------------------------

    def tensor(self, name: str) -> np.ndarray:
        """The tensor's values in the segment, shaped (a view, not a copy)."""
        t = self._by_name[name]
        n = int(np.prod(t.shape, dtype=np.int64)) if t.shape else 1
        return self.params[t.offset:t.offset + n].reshape(t.shape)

    def fragment_values(self, fragment: int) -> np.ndarray:
        f = self.fragments[fragment]
        return self.params[f.offset:f.offset + f.length]

    def fragment_tensors(self, fragment: int) -> List[str]:
        """Names of the tensors that lie in the fragment (fragments never cut one)."""
        f = self.fragments[fragment]
        return [t.name for t in self._layout if f.offset <= t.offset < f.offset + f.length]

    def next_round(self, fragment: int) -> int:
        """The round the next SYNC of `fragment` must carry."""
        return self.fragments[fragment].next_round

    # --- messages --------------------------------------------------------

    def send_initial(self, timeout: float = 600.0) -> None:
        """INIT: the segment holds this trainer's initial parameters. Waits
        for the RESULT after which the segment holds the anchor."""
        if self.anchor_ready:
            raise SyncError("invalid_argument", "the daemon sent the anchor; it did not ask for INIT")
        self._send(encode_init())
        self._init_pending = True
        result = self.wait_result(timeout)
        if result.fragment != ALL_FRAGMENTS:
            raise SyncError("malformed", "INIT was answered with a RESULT for fragment %d" % result.fragment)

    def sync(self, round: int, fragment: int, tokens: int, loss: float,
             timing: Optional[Tuple[float, float]] = None) -> None:
        """SYNC: the fragment's replica is in the segment. The daemon judges
        the round; a refusal comes back from wait_result(). `timing`: the
        trainer's (compute seconds, loop seconds) since its previous SYNC."""
        self._send(encode_sync(round, fragment, tokens, loss, timing))
        if 0 <= fragment < len(self._in_flight):
            self._in_flight[fragment] = True

    def wait_result(self, timeout: float = 600.0) -> "Result":
        """The next RESULT (a Result); raises DaemonRefused on ERROR."""
        msg = self._receive(timeout)
        if msg[0] == "ERROR":
            e = msg[1]
            if e.refused == SYNC and 0 <= e.fragment < len(self._in_flight):
                self._in_flight[e.fragment] = False
            if e.refused == INIT:
                self._init_pending = False
            raise e
        if msg[0] != "RESULT":
            raise SyncError("malformed", "the daemon sent %s where RESULT was expected" % msg[0])
        r = msg[1]
        if r.fragment == ALL_FRAGMENTS:
            if not self._init_pending:
                raise SyncError("malformed", "a RESULT for all fragments without an INIT")
            self._init_pending = False
            self.anchor_ready = True
            # The fragment table stays as WELCOME said (with streaming each
            # fragment has its own next round, which INIT does not change).
        else:
            if not (0 <= r.fragment < len(self.fragments)) or not self._in_flight[r.fragment]:
                raise SyncError("malformed", "a RESULT for fragment %d, which is not being synchronized" % r.fragment)
            self._in_flight[r.fragment] = False
            self.fragments[r.fragment] = self.fragments[r.fragment]._replace(next_round=r.next_round)
        if r.stop:
            self.stopped = True
        return r

    def send_raw(self, data):
        """Raw bytes (tests use it to play a broken trainer)."""
        self._send(data)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        self.params = None
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass  # a caller still holds a view; the mapping goes with it
            self._mm = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- internals -------------------------------------------------------

    def _send(self, data):
        try:
            self._sock.sendall(data)
        except OSError as e:
            raise SyncError("io", "send: %s" % e) from None

    def _receive(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            if len(self._inbox) >= _HEADER.size:
                type_, size = decode_header(bytes(self._inbox[:_HEADER.size]))
                if len(self._inbox) >= _HEADER.size + size:
                    body = bytes(self._inbox[_HEADER.size:_HEADER.size + size])
                    del self._inbox[:_HEADER.size + size]
                    return decode_body(type_, body)
            left = deadline - time.monotonic()
            if left <= 0:
                raise SyncError("timeout", "no answer from the daemon within %.1f s" % timeout)
            self._sock.settimeout(left)
            try:
                data, anc, flags, _ = self._sock.recvmsg(65536, socket.CMSG_SPACE(8 * 4), socket.MSG_CMSG_CLOEXEC)
            except socket.timeout:
                continue
            except OSError as e:
                raise SyncError("io", "receive: %s" % e) from None
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
                    self._fds.extend(fds)
            if not data:
                raise SyncError("io", "the daemon closed the connection%s"
                                % (" in the middle of a message" if self._inbox else ""))
            self._inbox += data
