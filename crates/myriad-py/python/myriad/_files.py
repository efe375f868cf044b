"""`open()`: a file on the cluster as a Python file object, built from Python's own io
layers over a raw file whose reads and writes are the native handle's pread/pwrite."""

import io

# Writes reach the cluster in pieces this big (a request each); reads come in pieces this
# big too. Big enough that a large file moves in few requests, small enough to bound memory.
BUFFER_BYTES = 4 * 1024 * 1024


class RawFile(io.RawIOBase):
    """Unbuffered file on the cluster: the position is kept here."""

    def __init__(self, handle, readable, writable, append):
        self._h = handle
        self._readable = readable
        self._writable = writable
        self._append = append
        self._pos = handle.size() if append else 0
        self.name = handle.path
        self.mode = "rb" if not writable else ("ab" if append else "wb")

    def readable(self):
        return self._readable

    def writable(self):
        return self._writable

    def seekable(self):
        return True

    def readinto(self, buf):
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        data = self._h.pread(self._pos, len(buf))
        n = len(data)
        buf[:n] = data
        self._pos += n
        return n

    def readall(self):
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        size = self._h.size()
        data = self._h.pread(self._pos, max(size - self._pos, 0))
        self._pos += len(data)
        return data

    def write(self, b):
        if not self._writable:
            raise io.UnsupportedOperation("not writable")
        if self._append:
            self._pos = self._h.size()
        n = self._h.pwrite(self._pos, bytes(b))
        self._pos += n
        return n

    def seek(self, offset, whence=io.SEEK_SET):
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._h.size() + offset
        else:
            raise ValueError(f"invalid whence ({whence})")
        if pos < 0:
            raise OSError(22, "negative seek position", self.name)
        self._pos = pos
        return pos

    def tell(self):
        return self._pos

    def truncate(self, size=None):
        if not self._writable:
            raise io.UnsupportedOperation("not writable")
        size = self._pos if size is None else size
        self._h.truncate(size)
        return size

    def fileno(self):
        raise io.UnsupportedOperation("a Myriad file has no file descriptor")

    def flush(self):
        # Every write is acknowledged only once durable: nothing is held here.
        pass

    def fsync(self):
        self._h.fsync()


def open_file(client, path, mode, buffering, encoding, errors, newline):
    modes = set(mode)
    if modes - set("rwxabt+") or len(mode) != len(modes) or len(modes & set("rwxa")) != 1:
        raise ValueError(f"invalid mode: {mode!r}")
    if "b" in modes and "t" in modes:
        raise ValueError("can't have text and binary mode at once")
    binary = "b" in modes
    if binary and (encoding is not None or errors is not None or newline is not None):
        raise ValueError("binary mode doesn't take an encoding, errors or newline argument")
    plus = "+" in modes
    readable = "r" in modes or plus
    writable = "r" not in modes or plus
    handle = client.open_handle(
        path,
        create="r" not in modes,
        exclusive="x" in modes,
        truncate="w" in modes,
        mode=0o666 & ~_umask(),
        read=readable,
        write=writable,
    )
    raw = RawFile(handle, readable, writable, append="a" in modes)
    if buffering == 0:
        if not binary:
            raise ValueError("can't have unbuffered text I/O")
        return raw
    size = BUFFER_BYTES if buffering in (-1, 1) else buffering
    if readable and writable:
        buffered = io.BufferedRandom(raw, size)
    elif writable:
        buffered = io.BufferedWriter(raw, size)
    else:
        buffered = io.BufferedReader(raw, size)
    if binary:
        return buffered
    text = io.TextIOWrapper(buffered, encoding or "utf-8", errors, newline,
                            line_buffering=buffering == 1)
    text.mode = mode
    return text


def _umask():
    """The process's umask, read without changing it (os.umask would race other threads)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022
