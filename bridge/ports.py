"""The ports between the core and the adapters: what a surface can do, what the core offers.

An adapter is a component (``initialize/start/stop/shutdown``) that registers its HTTP
routes on the gateway's one aiohttp application, turns platform events into
:class:`~bridge.model.Inbound` for :meth:`Gateway.submit`, and exposes a :class:`Surface`
the core replies through. A surface declares its :class:`Capabilities`; the core degrades by
itself where a surface can't (numbered choices instead of buttons, "still working" lines
instead of an edited bubble). Adapters are found through the ``jazz_bridge.adapters`` entry
point group, each an :class:`AdapterSpec`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from .errors import BridgeError
from .model import Attachment, Inbound, Outgoing, ReplyTarget

if TYPE_CHECKING:
    from aiohttp import web

    from .config import CoreSettings
    from .metrics import Metrics
    from .store import Store


@dataclass(frozen=True)
class Capabilities:
    edit: bool = False  # can edit a sent message (progress bubble)
    buttons: bool = False  # can show buttons bound to opaque tokens
    upload: bool = False  # can upload files
    typing: bool = False  # has a typing / status indicator
    max_length: int = 4000  # per message, after conversion, in length_unit
    length_unit: Literal["characters", "utf16"] = "characters"  # how max_length counts
    edit_interval_s: float = 1.0  # fastest progress edits the platform tolerates
    # can tell whether a reply already landed (its surface implements ConfirmsDelivery):
    # a reply that may have been in flight (at a crash, before a retry) is looked up first
    confirm_delivery: bool = False
    # what the platform's people start a command with: Slack keeps a message starting with
    # "/" for its own slash commands (its client refuses "/new" in a thread), so its adapter
    # takes "!new" for "/new"; the help names the commands in this form
    command_sigil: str = "/"


class DeliveryError(BridgeError):
    """A reply could not be delivered. ``permanent`` ones are not retried."""

    def __init__(self, message: str, *, permanent: bool = False, retry_after: float = 0.0):
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after


class ChatGone(DeliveryError):
    """The chat takes no more of the bot's messages: the person blocked the bot, it was
    removed from the group, the channel was archived or deleted (permanent).

    Typed, so the core can drop what that chat still had queued: no one would read the
    answers of those runs. A new message from the chat shows it is reachable again."""

    def __init__(self, message: str):
        super().__init__(message, permanent=True)


class FileTooLarge(DeliveryError):
    """An attached file over a size limit, the gateway's or the platform's (permanent).

    Typed, so a message with several files can leave this one out and run with the rest.
    ``size`` is None when only the download found it too large."""

    def __init__(self, name: str, limit: int, size: int | None = None):
        said = f"is {size:,} bytes, over" if size is not None else "is over"
        super().__init__(f"the file {name} {said} the {limit:,}-byte limit", permanent=True)
        self.name = name
        self.limit = limit
        self.size = size


@runtime_checkable
class Surface(Protocol):
    name: str
    capabilities: Capabilities

    async def send(self, target: ReplyTarget, message: Outgoing, *, reply_key: str) -> str:
        """Deliver ``message``; return the platform's reference to it (for edits)."""

    async def edit(self, target: ReplyTarget, ref: str, message: Outgoing) -> None:
        """Replace a sent message (progress). Best effort: may be dropped under flood control."""

    async def upload(
        self,
        target: ReplyTarget,
        name: str,
        data: bytes,
        media_type: str | None,
        *,
        reply_key: str,
    ) -> str:
        """Upload a file (an artifact read from inside the home); return its reference."""

    async def typing(self, target: ReplyTarget) -> None:
        """Show that the agent is working (renewed by the core while a run works)."""

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """Fetch an inbound attachment's bytes (at most ``max_bytes``)."""


@runtime_checkable
class ResolvesFiles(Protocol):
    """A surface whose inbound attachments may come without their name or address (Slack's
    ``file_access: check_file_info``: the id only). The core asks for the whole attachment
    before downloading it, so the file lands in the home under its real name."""

    async def resolve(self, attachment: Attachment) -> Attachment:
        """``attachment`` with its name, size and address (as it is when it has them)."""


@runtime_checkable
class ConfirmsDelivery(Protocol):
    """A surface that can find a reply it already delivered, by its reply key.

    Delivery records a reply, sends it, then marks it sent; a crash between the platform's
    answer and the mark (or a timeout whose request did land) leaves a reply that may or
    may not be on the platform. Before sending such a reply again, the core asks the
    surface (when its :class:`Capabilities` say ``confirm_delivery``), so a reply is
    delivered exactly once where the platform can say so (Slack: every message carries its
    reply key in message metadata), and at least once elsewhere.
    """

    async def find_sent(self, target: ReplyTarget, reply_key: str) -> str | None:
        """The platform's reference to the message or file sent with ``reply_key`` in
        ``target`` (what ``send``/``upload`` returned, or would have), or None when none
        landed. Raise :class:`DeliveryError` (or ``OSError``/``TimeoutError``) when it
        cannot tell now: the core asks again later rather than risk a second copy."""


class SubmitStatus(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    REFUSED = "refused"  # the gateway is shutting down: do not ack, let the platform retry


@dataclass(frozen=True)
class SubmitResult:
    status: SubmitStatus
    message_id: int | None = None


class PressStatus(StrEnum):
    OK = "ok"
    NOT_YOURS = "not_yours"
    EXPIRED = "expired"


@dataclass(frozen=True)
class PressResult:
    status: PressStatus
    text: str  # what to tell the presser (a toast, an ephemeral message)
    resolved: Outgoing | None = None  # how the prompt message should now read


class Gateway(Protocol):
    """What an adapter may ask of the core."""

    async def submit(self, inbound: Inbound) -> SubmitResult:
        """Persist an inbound message, then schedule it. Ack the platform only after this."""

    async def press(
        self,
        token: str,
        actor_id: str,
        *,
        is_operator: bool = False,
        actor_name: str | None = None,
    ) -> PressResult:
        """A person pressed a choice; ``actor_name``: how the chat shows them (as a
        message's ``sender_name``), for "Stopped by …"."""


@runtime_checkable
class Adapter(Protocol):
    name: str

    @property
    def surface(self) -> Surface: ...

    def add_routes(self, app: web.Application) -> None: ...

    async def initialize(self) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def shutdown(self) -> None: ...

    def health(self) -> str | None:
        """None when healthy, else what is down (shown by /healthz)."""


@dataclass(frozen=True)
class AdapterContext:
    settings: Any  # the adapter's own section (its settings_model instance)
    core: CoreSettings
    gateway: Gateway
    store: Store
    metrics: Metrics
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DoctorCheck:
    """One line of ``jazz-bridge doctor``: what was checked, and the fix when it failed."""

    ok: bool
    what: str
    fix: str = ""


@dataclass(frozen=True)
class LinkPatterns:
    """The thread key patterns a link to a message gives, tried in order.

    Each pattern is a thread key with ``*`` for the parts a link does not carry, the most
    precise first; a pattern counts only when it matches one conversation. ``first``: tried
    before ``patterns`` (a Telegram link to message N of a chat may be the link of forum
    topic N: a topic's id is the id of the message that opened it).
    """

    platform: str
    patterns: tuple[str, ...]
    first: tuple[str, ...] = ()


@dataclass(frozen=True)
class LinkReader:
    """How an operator's link to one of a platform's messages names its conversation
    (``jazz-bridge homes show <link>``, the /ops search): the platform's knowledge, given to
    the core by its :class:`AdapterSpec`."""

    # the link's host is one of these, or (for a name starting with ".") a subdomain of it
    hosts: tuple[str, ...]
    # (the link's path, its query) -> the patterns it gives, or None: not a message link
    patterns: Callable[[str, str], LinkPatterns | None]
    # Other keys a conversation is known by in links, given its thread key and its reply
    # target (a Telegram chat moved to a supergroup, or linked by its @username): each
    # position is one kind of alias (None: the conversation has none of that kind); a link is
    # tried against every conversation's first kind, then the second...
    aliases: Callable[[str, Mapping[str, Any]], tuple[str | None, ...]] | None = None

    def reads(self, host: str) -> bool:
        host = host.lower()
        return any(
            host == h.lstrip(".") or (h.startswith(".") and host.endswith(h)) for h in self.hosts
        )


@dataclass(frozen=True)
class AdapterSpec:
    """How the core finds an adapter: declared as an entry point in ``jazz_bridge.adapters``."""

    name: str
    section: str
    settings_model: type[BaseModel]
    factory: Callable[[AdapterContext], Adapter]
    enabled: Callable[[Any], bool]  # given its settings section: is it switched on?
    # ``jazz-bridge doctor``'s platform checks (credentials valid, webhook registered), given
    # the adapter's settings section; called only when the adapter is enabled
    doctor: Callable[[Any], Awaitable[list[DoctorCheck]]] | None = None
    # The rules its settings section must meet for ``serve`` to start it, that the settings
    # model's types cannot say (an allowlist set, the secret its mode needs), given the section
    # and the core's settings: one actionable line per rule broken, none when it may start.
    # Called only when the adapter is enabled, by serve, ``config check`` and ``doctor`` alike
    # (:mod:`bridge.rules`), so none of them accepts what another refuses.
    check: Callable[[Any, CoreSettings], list[str]] | None = None
    # Why a section that holds settings still leaves the adapter off (the credential that
    # switches it on is missing), given the section: one warning line each, none when the
    # section is untouched or switched off on purpose (``enabled = false``). Called only when
    # the adapter is not enabled; serve logs each line at start, ``config check`` and
    # ``doctor`` show it, none of them refuses for it (:func:`bridge.rules.warnings`).
    dormant: Callable[[Any], list[str]] | None = None
    # The URL prefix every route of the adapter is under ("/slack/"): a request refused
    # there (too big, too many at once) is counted under the adapter's name in /metrics.
    route_prefix: str | None = None
    # How links to its messages name its conversations (operators paste them)
    links: LinkReader | None = None


def changed_keys(section: BaseModel) -> list[str]:
    """The keys of a settings section whose value is not their default (in field order),
    whether set in the TOML file or the environment: a section the example config spells
    out with every default is not "configured"."""
    try:
        default = type(section)()
    except ValueError:  # a section with required fields: all of its set keys count
        return [k for k in type(section).model_fields if k in section.model_fields_set]
    return [k for k in type(section).model_fields if getattr(section, k) != getattr(default, k)]
