"""Files with holes in a home's tarball: packed by their data, restored as holes again.

Split out of :mod:`provisioning.archive` (the archive's entry points) because it is its
own problem: a conversation makes a file with holes for free (``truncate -s 1T``), and
reading every zero of it would cost hours. A file whose allocated blocks are fewer than
its size is read extent by extent (``SEEK_DATA``/``SEEK_HOLE``) and stored as a GNU sparse
member (format 1.0, in PAX headers: the extent map, then the data), which ``tarfile`` and
GNU tar both read, so the cost of packing follows the data, not the apparent size.
Restoring writes a sparse member's extents and truncates it to its size, so holes stay
holes; any other file's all-zero stretches of :data:`COPY_CHUNK` are skipped too (holes;
the same bytes), which also keeps an archive made before this from filling the disk.

A file with more extents than the limit (:class:`SparseLimits`, the map is held in memory)
has its smallest holes packed as zeros until the map fits; one that would need more zeros
than its limit for that (a file made to be as fragmented as it can) leaves its home
unarchived, with an error naming it, rather than reading terabytes of holes. The limits
themselves are the archive's (``provisioning.archive.MAX_SPARSE_EXTENTS`` and friends),
handed in at each archiving.

:class:`SparseSafeInfo` is how every tarball is read: it fixes ``tarfile``'s reading of
big sparse members and refuses a header cut short or garbled.
"""

from __future__ import annotations

import errno
import logging
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, cast

from .errors import ArchiveError

log = logging.getLogger("provisioning.archive")  # the archive's log, as before the split

COPY_CHUNK = 1024 * 1024
ZEROS = bytes(COPY_CHUNK)
SPARSE_DIR = "GNUSparseFile.0"  # GNU tar's header name for a sparse member (the real one in PAX)


@dataclass(frozen=True)
class SparseLimits:
    """How fragmented a file may be: ``extents`` stored sparse at most (the map is in
    memory); ``scanned`` found at most, and at most ``filled_zeros`` bytes of holes read as
    zeros to fit the map, or the home is not archived (either would cost hours)."""

    extents: int
    scanned: int
    filled_zeros: int


# -- packing -----------------------------------------------------------------------------------


def data_extents(
    fd: int, st: os.stat_result, arc: str, limits: SparseLimits
) -> list[tuple[int, int]] | None:
    """The (offset, length) runs of data of a file with holes, or None to store it whole.

    Only a file with fewer allocated bytes than its size can have holes; the extents are
    found with ``SEEK_DATA``/``SEEK_HOLE`` (a filesystem without them reports one extent,
    the whole file). A file that ends in a hole gets GNU tar's closing ``(size, 0)``.
    """
    if st.st_blocks * 512 >= st.st_size:
        return None
    try:
        return _seek_extents(fd, st.st_size, arc, limits)
    finally:
        os.lseek(fd, 0, os.SEEK_SET)  # stored whole after all: read from the start


def _seek_extents(
    fd: int, size: int, arc: str, limits: SparseLimits
) -> list[tuple[int, int]] | None:
    """:func:`data_extents`' walk; it moves the file's offset, which the caller resets."""
    extents: list[tuple[int, int]] = []
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole from pos on
                break
            return None  # no SEEK_DATA here: read it all, as before
        if start >= size:
            break
        try:
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        except OSError as exc:  # truncated meanwhile (a process the run left behind)
            raise ArchiveError(f"{arc} changed while it was packed: {exc}") from exc
        extents.append((start, end - start))
        if len(extents) > limits.scanned:
            raise ArchiveError(
                f"{arc} has more than {limits.scanned:,} separate runs of data: a file "
                "this fragmented cannot be packed in reasonable time; the home is left as it is"
            )
        pos = end
    if extents == [(0, size)]:
        return None  # no hole after all (a compressed filesystem's block count)
    if len(extents) > limits.extents:
        extents = _filled_in(extents, limits.extents, limits.filled_zeros, arc)
    if not extents or sum(extents[-1]) < size:
        extents.append((size, 0))
    return extents


def _filled_in(
    extents: list[tuple[int, int]], most: int, most_zeros: int, arc: str
) -> list[tuple[int, int]]:
    """``extents`` merged into at most ``most`` by filling in their smallest holes (packed as
    the zeros they read as; restored as holes again, a MiB at a time), reading at most
    ``most_zeros`` of them."""
    gaps = sorted(
        range(len(extents) - 1),
        key=lambda i: extents[i + 1][0] - sum(extents[i]),
    )[: len(extents) - most]
    zeros = sum(extents[i + 1][0] - sum(extents[i]) for i in gaps)
    if zeros > most_zeros:
        raise ArchiveError(
            f"{arc} has {len(extents):,} separate runs of data; packing it would read "
            f"{zeros:,} bytes of holes as zeros: the home is left as it is"
        )
    log.info(
        "archiving %s: %d runs of data; %d of its smallest holes (%d bytes) packed as zeros",
        arc,
        len(extents),
        len(gaps),
        zeros,
    )
    filled = set(gaps)
    merged: list[tuple[int, int]] = []
    for i, (start, length) in enumerate(extents):
        if i - 1 in filled:  # the hole before it is filled in: one run with the previous
            prev_start, _ = merged[-1]
            merged[-1] = (prev_start, start + length - prev_start)
        else:
            merged.append((start, length))
    return merged


# tarfile's "the end-of-archive blocks" (not in typeshed, hence getattr)
_END_OF_ARCHIVE: type[tarfile.HeaderError] = getattr(tarfile, "EOFHeaderError")  # noqa: B009


class SparseSafeInfo(tarfile.TarInfo):
    """``tarfile``'s reading of a GNU sparse 1.0 member whose stored size (map and data)
    is 8 GiB or more, fixed: such a member carries a PAX ``size`` record, which ``tarfile``
    applies after ``GNU.sparse.realsize`` (the member's size became the stored size) and
    counts from past the map (the next header was looked for too far on). Here the size is
    the file's and the next header follows the stored data, as GNU tar reads it."""

    def _proc_pax(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        member = cast(tarfile.TarInfo, super()._proc_pax(tar))  # type: ignore[misc]
        headers = member.pax_headers
        if (
            headers.get("GNU.sparse.major") == "1"
            and headers.get("GNU.sparse.minor") == "0"
            and "size" in headers
            and "GNU.sparse.realsize" in headers
        ):
            # the map starts a block past the member's header, which follows this one's
            block = tarfile_block(self.size)
            map_start = self.offset + tarfile_block(1) + block + tarfile_block(1)
            tar.offset = map_start + tarfile_block(int(headers["size"]))
            member.size = int(headers["GNU.sparse.realsize"])
        return member

    @classmethod
    def fromtarfile(cls, tar: tarfile.TarFile) -> SparseSafeInfo:
        """The next header; a header cut short, empty or garbled is an ArchiveError (tarfile
        ends the listing there without a word, and the home would come back half)."""
        try:
            return super().fromtarfile(tar)
        except _END_OF_ARCHIVE:
            raise  # the end-of-archive blocks: the one right way for the listing to end
        except tarfile.HeaderError as exc:
            raise ArchiveError(
                f"the archive is damaged at byte {tar.offset} of its tar stream ({exc})"
            ) from exc


def tarfile_block(count: int) -> int:
    """``count`` bytes rounded up to whole tar blocks."""
    blocks, rest = divmod(count, tarfile.BLOCKSIZE)
    return (blocks + (1 if rest else 0)) * tarfile.BLOCKSIZE


def sparse_info(info: tarfile.TarInfo, real_size: int, stored: int) -> None:
    """Make ``info`` a GNU sparse 1.0 member: the header names ``GNUSparseFile.0/<base>``
    (what a tar without sparse support would extract, map included), PAX carries the real
    name and size. ``path`` comes first: of the two, the later record wins on reading."""
    real = info.name
    head, _, base = real.rpartition("/")
    info.pax_headers = {
        "path": f"{head}/{SPARSE_DIR}/{base}",
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": real,
        "GNU.sparse.realsize": str(real_size),
    }
    info.name = f"{head}/{SPARSE_DIR}/{base}"
    info.size = stored


class SparseData:
    """A sparse member's data as the tar stream holds it: the extent map (count, then each
    offset and length, one number a line, padded to a block), then each extent's bytes.
    Like :class:`provisioning.archive_write.Exactly`, an extent that shrank meanwhile is
    padded with zeros."""

    def __init__(self, fd: int, extents: list[tuple[int, int]], real_size: int) -> None:
        numbers = [len(extents), *(n for extent in extents for n in extent)]
        text = "".join(f"{n}\n" for n in numbers).encode()
        self.map = text + bytes(-len(text) % tarfile.BLOCKSIZE)
        self.fd, self.extents = fd, extents
        self.size = len(self.map) + sum(length for _, length in extents)
        self._chunks = self._read_all()
        self._chunk, self._at = b"", 0

    def _read_all(self) -> Iterator[bytes]:
        yield self.map
        for offset, length in self.extents:
            done = 0
            while done < length:
                want = min(COPY_CHUNK, length - done)
                data = os.pread(self.fd, want, offset + done)
                if len(data) < want:
                    data += bytes(want - len(data))
                done += want
                yield data

    def read(self, n: int = -1) -> bytes:
        """``n`` bytes (all that is left when fewer or ``n`` < 0): tarfile wants them whole."""
        parts: list[bytes] = []
        while n != 0:
            if self._at >= len(self._chunk):
                self._chunk, self._at = next(self._chunks, b""), 0
                if not self._chunk:
                    break
            take = len(self._chunk) - self._at if n < 0 else min(n, len(self._chunk) - self._at)
            parts.append(self._chunk[self._at : self._at + take])
            self._at += take
            n = n - take if n > 0 else n
        return b"".join(parts)


# -- restoring ---------------------------------------------------------------------------------


def write_with_holes(src: IO[bytes], out: IO[bytes], member: tarfile.TarInfo) -> None:
    """Write ``member``'s bytes to ``out`` leaving holes where it had them.

    A sparse member's extents are written where they belong (``src`` reads its holes as
    zeros; they are never read); of the rest, a whole :data:`COPY_CHUNK` of zeros is
    skipped. The file is then truncated to its size, so a trailing hole is a hole too.
    """
    sparse: list[tuple[int, int]] | None = getattr(member, "sparse", None)  # typeshed: bytes
    extents = sparse if sparse is not None else [(0, member.size)]
    end = 0
    for offset, length in extents:
        if offset < end or length < 0 or offset + length > member.size:
            raise ArchiveError(f"{member.name}: a sparse map out of order or past its size")
        src.seek(offset)
        out.seek(offset)
        left = length
        while left > 0:
            chunk = src.read(min(COPY_CHUNK, left))
            if not chunk:
                raise ArchiveError(f"{member.name}: the archive ends inside its data")
            left -= len(chunk)
            if chunk == ZEROS[: len(chunk)] and len(chunk) == COPY_CHUNK:
                out.seek(len(chunk), os.SEEK_CUR)  # a hole, the same bytes
            else:
                out.write(chunk)
        end = offset + length
    out.truncate(member.size)
