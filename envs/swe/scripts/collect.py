"""Lists the workspace's files, and sends back the ones that differ from a given base.

Run in the workspace (cwd) as ``python3 -I -S -c <this>`` with a ``marshal``-ed request on stdin::

    {"base": {path bytes: sha256 digest} | None, "content": bool, "prune": [names],
     "max_entries": int, "max_file_bytes": int, "max_total_bytes": int}

It walks the tree without following symlinks (names starting with ``.`` and the ``prune`` names
are neither entered nor listed) and writes one record per entry to stdout, in the fixed layout
``RECORD`` (kind, mode, size, sha256, flags, path length, extra length), then the path, then the
extra bytes (a link's target, or why a file could not be read), then, when flag ``DATA`` is set,
the file's ``size`` bytes. Kinds: ``FILE``, ``LINK``, ``OTHER`` (FIFOs, sockets, devices).

With ``content``, a regular file whose hash differs from ``base`` (or is absent from it) is
followed by its bytes, unless it is over ``max_file_bytes`` or the total is spent (flag ``BIG``
instead). Files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and must be regular, so a FIFO or a
symlink swapped in cannot stall or redirect the read. The last record has kind ``END`` (its size:
the number of entries) or ``OVER`` (the tree holds more than ``max_entries``). Only built-in
modules are imported, so it starts in milliseconds.
"""

import marshal
import os
import stat
import struct
import sys

try:
    from _sha2 import sha256  # Python >= 3.12
except ImportError:
    try:
        from _sha256 import sha256
    except ImportError:
        from hashlib import sha256

RECORD = struct.Struct("!BIQ32sBII")
FILE, LINK, OTHER, OVER, END = 0, 1, 2, 254, 255
DATA, BIG = 1, 2
CHUNK = 1 << 20


def _read(name, limit):
    """``(bytes or None, sha256 digest)``: the content when it is at most ``limit`` bytes."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        digest, parts, size = sha256(), [], 0
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
            if size <= limit:
                parts.append(chunk)
        return (b"".join(parts) if size <= limit else None), digest.digest()
    finally:
        os.close(fd)


def _entries(prune):
    stack = [b""]
    while stack:
        folder = stack.pop()
        try:
            listing = sorted(os.scandir(folder or b"."), key=lambda e: e.name)
        except OSError:
            continue
        for entry in listing:
            if entry.name.startswith(b".") or entry.name in prune:
                continue
            path = folder + b"/" + entry.name if folder else entry.name
            if entry.is_dir(follow_symlinks=False):
                stack.append(path)
            else:
                yield path, entry


def main():
    request = marshal.loads(sys.stdin.buffer.read())
    base, out = request["base"], sys.stdout.buffer
    budget = request["max_total_bytes"]
    count = 0
    for path, entry in _entries(set(request["prune"])):
        count += 1
        if count > request["max_entries"]:
            out.write(RECORD.pack(OVER, 0, 0, b"", 0, 0, 0))
            return
        info = entry.stat(follow_symlinks=False)
        kind, digest, flags, extra, data = OTHER, b"", 0, b"", None
        if stat.S_ISLNK(info.st_mode):
            kind, extra = LINK, os.readlink(path)
        elif stat.S_ISREG(info.st_mode):
            kind = FILE
            try:
                data, digest = _read(path, min(request["max_file_bytes"], budget))
            except OSError as exc:
                extra = (exc.strerror or str(exc)).encode("utf-8", "replace")
            changed = base is None or base.get(path) != digest
            if not (request["content"] and changed) or extra:
                data = None
            elif data is None:
                flags = BIG
        if data is not None:
            flags, budget = DATA, budget - len(data)
        size = len(data) if data is not None else info.st_size
        out.write(RECORD.pack(kind, stat.S_IMODE(info.st_mode), size, digest, flags, len(path), len(extra)))
        out.write(path + extra + (data or b""))
    out.write(RECORD.pack(END, 0, count, b"", 0, 0, 0))


if __name__ == "__main__":
    main()
