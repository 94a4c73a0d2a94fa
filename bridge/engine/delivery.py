"""Delivering recorded replies through their surfaces, in order, each at most once.

A reply is recorded in the store before it is sent (with its run's outcome, in one
transaction) and marked ``sent`` after the platform call, so after a crash every reply not
yet marked sent is sent at start and none that was marked sent is sent again. A reply that
may have landed without its mark (one found at start, or retried after a failure whose
request may have gone through) is first looked up on a surface that can tell
(``Capabilities.confirm_delivery``, :class:`~bridge.ports.ConfirmsDelivery`): found, it is
marked sent with that reference and not sent again (exactly once); elsewhere it is sent
again (at least once). Retries are counted as ``sending``. The mark of a delivery's last
reply is written with the store's next write (:meth:`Deliverer._mark_sent`), not waited for
by the turn; the conversation's next delivery, and the gateway's stop, wait for it.
A reply's state is recorded through the shared :class:`~bridge.store.StoreRetry`: a
store that cannot write for a while (a full disk) is waited out while the conversation's
later replies wait behind this one, so none overtakes another, none is stranded and none
that went out is sent again; only a gateway that stops meanwhile leaves the mark unwritten
(the next start then sends it in doubt, as above).
Transient failures are retried with backoff (honouring a platform's retry-after): quickly
at first, then every ``SLOW_BACKOFF_S``, until the reply is ``PATIENCE_S`` old (counted
from when it was recorded, so across restarts too). An answer the agent took minutes to
make is not given up over a platform's half-minute outage; one that a platform refuses
for an hour (a failure that is not passing after all) is then given up so the
conversation's later replies are not held for ever. A permanent failure is recorded as
failed at once; neither is silently dropped: both are logged and counted. A rate limit (a
failure carrying a retry-after) is a refusal, not a failed attempt: nothing was posted, so
it neither uses up the attempt budget nor puts the reply in doubt; a storm of them is
waited out for up to ``MAX_RATE_LIMITED_S`` in all.
A chat that takes no more messages (:class:`~bridge.ports.ChatGone`: the bot blocked or
removed) is remembered: that conversation's later replies are given up without another
call to the platform, and the core is told (``on_gone``) so that it drops the messages the
chat still had queued, until a new message from the chat shows it is reachable again
(:meth:`Deliverer.reachable`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

from provisioning.errors import UnsafePathError

from ..files import paths_for_people, read_in_home
from ..metrics import Metrics
from ..model import Outgoing, ReplyKind, ReplyState
from ..ports import ChatGone, ConfirmsDelivery, DeliveryError, Surface
from ..store import ReplyRecord, Store, StoreRetry

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 6  # tries at a growing pace (1, 2, 4 ... s); then every SLOW_BACKOFF_S
MAX_BACKOFF_S = 30.0
SLOW_BACKOFF_S = 300.0
PATIENCE_S = 3600.0  # transient failures are retried until a reply is this old
MAX_RATE_LIMITED_S = 900.0  # waiting out a platform's rate limits, per reply, at most
DONE_MEMORY = 100_000
GONE_MEMORY = 10_000  # chats known to take no more messages (oldest forgotten first)


class Deliverer:
    def __init__(
        self,
        store: Store,
        surfaces: Mapping[str, Surface],
        metrics: Metrics,
        home_path: Callable[[int], Path | None],
        retry: StoreRetry | None = None,
        on_gone: Callable[[int, str], None] | None = None,
    ) -> None:
        self.store = store
        self.on_gone = on_gone
        self.retry = retry or StoreRetry()
        self.surfaces = surfaces
        self.metrics = metrics
        self.home_path = home_path
        # one lock per conversation with replies on their way (and how many wait on it):
        # dropped when none do, or every conversation ever answered kept one
        self._locks: dict[int, tuple[asyncio.Lock, int]] = {}
        self._done: set[int] = set()  # delivered in this process (guards a repeated call)
        # conversation -> why its chat takes no more messages (see the module docstring)
        self._gone: OrderedDict[int, str] = OrderedDict()
        # conversation -> the "sent" mark of its last reply, still on its way to the disk
        self._marking: dict[int, asyncio.Task[None]] = {}
        self.closing = False

    @property
    def conversations_in_order(self) -> int:
        """Conversations with replies on their way (each holds a lock while it has)."""
        return len(self._locks)

    def gone(self, conversation_id: int) -> str | None:
        """Why the conversation's chat takes no more messages, or None (it may)."""
        return self._gone.get(conversation_id)

    def reachable(self, conversation_id: int) -> None:
        """The chat wrote again (the bot unblocked, added back): its replies go out again."""
        if self._gone.pop(conversation_id, None) is not None:
            log.info("conversation %d: its chat is reachable again", conversation_id)

    def _chat_gone(self, rec: ReplyRecord, exc: ChatGone) -> None:
        why = str(exc)
        first = rec.conversation_id not in self._gone
        self._gone[rec.conversation_id] = why
        self._gone.move_to_end(rec.conversation_id)
        while len(self._gone) > GONE_MEMORY:
            self._gone.popitem(last=False)
        if first:
            log.warning(
                "%s takes no more of the bot's messages (%s): its later replies and "
                "queued messages are given up until it writes again",
                rec.target.thread_key,
                why,
            )
            if self.on_gone is not None:
                self.on_gone(rec.conversation_id, why)

    @contextlib.asynccontextmanager
    async def _in_order(self, conversation_id: int) -> AsyncIterator[None]:
        """Hold the conversation's lock: its replies go out one after the other."""
        lock, users = self._locks.get(conversation_id, (asyncio.Lock(), 0))
        self._locks[conversation_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[conversation_id]
            if users > 1:
                self._locks[conversation_id] = (lock, users - 1)
            else:
                del self._locks[conversation_id]

    async def deliver(self, records: list[ReplyRecord], *, in_doubt: bool = False) -> set[int]:
        """Send ``records`` in order (one conversation's replies never overtake each other);
        returns the ids of those that did not get through (failed, or left pending).

        ``in_doubt``: these may have landed already (replies found undelivered at start).
        """
        by_conv: dict[int, list[ReplyRecord]] = {}
        for rec in records:
            by_conv.setdefault(rec.conversation_id, []).append(rec)
        missed = await asyncio.gather(
            *(self._deliver_conv(cid, recs, in_doubt) for cid, recs in by_conv.items())
        )
        return set().union(*missed)

    async def _deliver_conv(
        self, conversation_id: int, records: list[ReplyRecord], in_doubt: bool
    ) -> set[int]:
        missed: set[int] = set()
        async with self._in_order(conversation_id):
            marking = self._marking.pop(conversation_id, None)
            if marking is not None:  # the last reply's mark is written before the next goes
                await marking
            for i, rec in enumerate(records):
                # records come straight from the store's write (or its recovery query), so
                # their state is current; one already sent is never sent again
                if rec.id in self._done or rec.state is ReplyState.SENT:
                    continue
                last = i == len(records) - 1
                if rec.state is ReplyState.FAILED or not await self._deliver_one(
                    rec, in_doubt, last=last
                ):
                    missed.add(rec.id)
                    continue
                self._done.add(rec.id)
                if len(self._done) > DONE_MEMORY:
                    self._done.clear()
        return missed

    async def _deliver_one(self, rec: ReplyRecord, in_doubt: bool, *, last: bool) -> bool:
        """Send one reply; True once it is on the platform (sent, or found there).

        The "sent" mark of a conversation's ``last`` reply of a delivery is not waited for
        here (:meth:`_mark_sent`): it shares the commit of the store's next write."""
        surface = self.surfaces.get(rec.target.surface)
        if surface is None:
            log.warning(
                "reply %d is for surface %r, which is not enabled; it stays pending",
                rec.id,
                rec.target.surface,
            )
            return False
        gone = self._gone.get(rec.conversation_id)
        if gone is not None:  # no call: the platform would refuse it as the last one was
            log.info(
                "reply %d to %s not sent: its chat takes no more messages",
                rec.id,
                rec.target.thread_key,
            )
            self.metrics.replies.labels(rec.target.surface, "failed").inc()
            await self._mark(
                rec, ReplyState.FAILED, error=f"the chat takes no more messages ({gone})"
            )
            return False
        confirms = surface.capabilities.confirm_delivery and isinstance(surface, ConfirmsDelivery)
        doubt = in_doubt or rec.attempts > 0
        attempt = rec.attempts
        limited = 0.0  # seconds spent waiting out rate limits
        retrying = attempt > 0  # counted in the store's attempts (those that may have landed)
        while True:
            attempt += 1
            if retrying:  # a retry: count it (a first attempt costs no extra write)
                await self._mark(rec, ReplyState.SENDING)
            retrying = True
            was_in_doubt = doubt
            # an earlier try may have landed and nobody could look: this one may be a copy
            blind = doubt and not confirms
            try:
                if doubt and confirms:
                    assert isinstance(surface, ConfirmsDelivery)
                    found, told = await self._landed(surface, rec, last=attempt >= MAX_ATTEMPTS)
                    if found is not None:
                        log.info("reply %d had landed before (%s): not sent again", rec.id, found)
                        await self._mark(rec, ReplyState.SENT, platform_ref=found)
                        self.metrics.replies.labels(rec.target.surface, "confirmed").inc()
                        return True
                    blind = not told
                doubt = True  # from here on, a failed attempt may have landed
                ref = await self._send(surface, rec)
            except DeliveryError as exc:
                if exc.retry_after > 0 and not exc.permanent:
                    # rate limited: refused, so not posted (nor a copy); wait it out, bounded
                    attempt -= 1
                    doubt = was_in_doubt
                    retrying = False  # the next try is not counted as a retry either
                    delay = exc.retry_after
                    limited += delay
                    if limited > MAX_RATE_LIMITED_S:
                        await self._failed(rec, f"{exc} (rate limited for {limited:.0f}s)")
                        return False
                else:
                    self._maybe_twice(rec, blind)
                    if exc.permanent or self._patience_over(rec, attempt):
                        await self._failed(rec, str(exc))
                        if isinstance(exc, ChatGone):
                            self._chat_gone(rec, exc)
                        return False
                    delay = self._backoff(rec, attempt, exc)
            except (OSError, TimeoutError) as exc:
                self._maybe_twice(rec, blind)
                if self._patience_over(rec, attempt):
                    await self._failed(rec, f"{type(exc).__name__}: {exc}")
                    return False
                delay = self._backoff(rec, attempt, exc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # a surface's own bug (not a platform's answer): it would fail the same way
                # again, so the reply is given up, logged with its traceback, and the
                # conversation's later replies go on (escaping here, it stopped them all)
                log.exception("reply %d: the %s surface failed", rec.id, rec.target.surface)
                self._maybe_twice(rec, blind)
                await self._failed(rec, f"the {rec.target.surface} surface failed: {exc!r}")
                return False
            else:
                self._maybe_twice(rec, blind)
                if last and not self.closing:
                    self._mark_sent(rec, ref)
                else:
                    await self._mark(rec, ReplyState.SENT, platform_ref=ref)
                self.metrics.replies.labels(rec.target.surface, "sent").inc()
                return True
            if self.closing:
                await self._mark(rec, ReplyState.PENDING)
                return False
            log.info("reply %d: retrying in %.1fs (attempt %d)", rec.id, delay, attempt)
            self.metrics.replies.labels(rec.target.surface, "retried").inc()
            await asyncio.sleep(delay)  # backoff between attempts, not synchronisation

    @staticmethod
    def _patience_over(rec: ReplyRecord, attempt: int) -> bool:
        """Whether a transient failure ends the reply's tries (see the module docstring)."""
        return attempt >= MAX_ATTEMPTS and time.time() - rec.created_at >= PATIENCE_S

    @staticmethod
    def _backoff(rec: ReplyRecord, attempt: int, exc: Exception) -> float:
        """The pause before the next try: doubling up to MAX_BACKOFF_S, then slow."""
        if attempt < MAX_ATTEMPTS:
            return min(2.0 ** (attempt - 1), MAX_BACKOFF_S)
        if attempt == MAX_ATTEMPTS:
            log.warning(
                "reply %d to %s: not delivered after %d tries (%s); trying again every %.0fs "
                "for up to %.0f minutes from its making (the conversation's later replies wait)",
                rec.id,
                rec.target.thread_key,
                attempt,
                exc,
                SLOW_BACKOFF_S,
                PATIENCE_S / 60,
            )
        return SLOW_BACKOFF_S

    def _maybe_twice(self, rec: ReplyRecord, blind: bool) -> None:
        """Count (and say) a try that was made blind after one that may have landed."""
        if blind:
            log.warning(
                "reply %d: sent again after a try whose outcome is unknown, without being "
                "able to look it up on %s: it may show twice",
                rec.id,
                rec.target.surface,
            )
            self.metrics.replies.labels(rec.target.surface, "resent_unconfirmed").inc()

    async def _landed(
        self, surface: ConfirmsDelivery, rec: ReplyRecord, *, last: bool
    ) -> tuple[str | None, bool]:
        """Where the reply landed (None: not there), and whether the surface could tell. On
        the last attempt, "cannot tell" means send: a second copy beats no answer at all."""
        try:
            return await surface.find_sent(rec.target, rec.dedupe_key), True
        except (DeliveryError, OSError, TimeoutError) as exc:
            if not last:
                raise
            log.warning(
                "reply %d: cannot tell whether it landed (%s); sending it again", rec.id, exc
            )
            return None, False

    async def _mark(
        self,
        rec: ReplyRecord,
        state: ReplyState,
        *,
        platform_ref: str | None = None,
        error: str | None = None,
        soon: bool = False,
    ) -> None:
        """Record a reply's state; a store error never escapes (see the module docstring)."""
        mark = functools.partial(
            self.store.mark_reply,
            rec.id,
            state,
            platform_ref=platform_ref,
            error=error,
            soon=soon,
        )
        await self.retry.run(mark, f"reply {rec.id} to {rec.target.thread_key} ({state.value})")

    def _mark_sent(self, rec: ReplyRecord, ref: str) -> None:
        """Mark ``rec`` sent in a tracked task, with the store's next write (``soon``).

        Why: a conversation answered one message at a time made a commit (and its disk
        flush) of its own for each answer's mark, the turn waiting on it. The order of the
        conversation's replies still holds: its next delivery waits for this mark first
        (:meth:`_deliver_conv`), so a store that cannot write still holds the replies
        behind it, and :meth:`settle` writes the marks before the store closes. A gateway
        killed before the mark reached the disk sends the reply again at start (in doubt,
        as for one killed between the send and an awaited mark).
        """

        async def mark() -> None:
            try:
                await self._mark(rec, ReplyState.SENT, platform_ref=ref, soon=True)
            except Exception:
                log.exception("reply %d: its sent mark was not written", rec.id)

        conversation_id = rec.conversation_id
        task = asyncio.create_task(mark(), name=f"sent-{rec.id}")
        self._marking[conversation_id] = task

        def forget(done: asyncio.Task[None]) -> None:  # one entry per mark on its way only
            if self._marking.get(conversation_id) is done:
                del self._marking[conversation_id]

        task.add_done_callback(forget)

    async def marked(self, conversation_id: int) -> None:
        """Wait until the conversation's replies sent are marked so (a caller about to read
        one back, its ``platform_ref`` say)."""
        marking = self._marking.get(conversation_id)
        if marking is not None:
            await asyncio.shield(marking)

    async def settle(self) -> None:
        """Wait until every reply sent is marked so (before the store closes)."""
        while self._marking:
            await asyncio.gather(*self._marking.values())
            self._marking = {c: t for c, t in self._marking.items() if not t.done()}

    async def abandon(self, timeout_s: float) -> None:
        """:meth:`settle` for at most ``timeout_s``, then cancel the marks left: their
        replies are sent again, in doubt, at the next start."""
        marks = list(self._marking.values())
        if marks:
            _done, left = await asyncio.wait(marks, timeout=timeout_s)
            for task in left:
                task.cancel()
            await asyncio.gather(*left, return_exceptions=True)
        self._marking.clear()

    async def _failed(self, rec: ReplyRecord, error: str) -> None:
        log.error("reply %d to %s could not be delivered: %s", rec.id, rec.target.thread_key, error)
        self.metrics.replies.labels(rec.target.surface, "failed").inc()
        await self._mark(rec, ReplyState.FAILED, error=error)

    async def _send(self, surface: Surface, rec: ReplyRecord) -> str:
        out = rec.outgoing
        if out.kind is ReplyKind.ARTIFACT and out.file_path:
            name = os.path.basename(out.file_path)
            home = self.home_path(rec.conversation_id)
            try:
                if home is None:
                    raise UnsafePathError("the conversation has no home")
                data = await asyncio.to_thread(read_in_home, home, out.file_path)
            except (UnsafePathError, OSError) as exc:
                # the log names the full path; the chat, the file relative to the home
                log.warning(
                    "artifact %s of %s not sent: %s", out.file_path, rec.target.thread_key, exc
                )
                why = str(exc)
                if home is not None:  # <root>/chats/<home>
                    why = paths_for_people(why, home, home.parents[1])
                notice = Outgoing(kind=ReplyKind.NOTICE, text=f"Artifact `{name}` not sent: {why}")
                return await surface.send(rec.target, notice, reply_key=rec.dedupe_key)
            if surface.capabilities.upload:
                return await surface.upload(
                    rec.target, name, data, out.media_type, reply_key=rec.dedupe_key
                )
            notice = Outgoing(
                kind=ReplyKind.NOTICE,
                text=f"The agent made `{name}` ({len(data):,} bytes); this chat cannot show files.",
            )
            return await surface.send(rec.target, notice, reply_key=rec.dedupe_key)
        return await surface.send(rec.target, out, reply_key=rec.dedupe_key)
