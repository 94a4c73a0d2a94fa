"""The gateway as one component: provisioning, store, runner, engine, adapters, HTTP server.

``initialize`` does everything that can fail (config sections, the root, accounts, the
database, the adapters' credentials) before anything is acknowledged; ``start`` recovers
and opens intake; ``stop`` closes intake, stops runs in flight with a reply to each, and
releases everything, within the shutdown grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import logging
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from provisioning.accounts import AccountRegistry
from provisioning.cgroups import find_tree
from provisioning.errors import LayoutError
from provisioning.homes import Homes
from provisioning.layout import Layout, RootInfo, init_root, untraversable_ancestor
from provisioning.modes import STATE_FILE_MODE
from provisioning.private_proc import proc_hides_other_uids
from provisioning.repair import repair
from provisioning.sandbox import private_proc_unavailable, resolve_isolation

from . import rules
from .config import CoreSettings
from .engine import Engine, run_limits
from .errors import AdapterError, BridgeError, ConfigError
from .http.connections import PeerConnections, PeerLimitedSite
from .http.ops import add_ops_routes
from .http.server import build_app, make_runner
from .metrics import Metrics
from .operators import OPS_SIZE_TTL_S, Operators
from .ports import Adapter, AdapterContext, AdapterSpec
from .retention import Sweeper
from .runner import CliRunner, RunnerBackend, default_command
from .runner.dialect import runner_profile, template_provider
from .runner.killer import kill_accounts
from .store import SqliteStore, Store

log = logging.getLogger(__name__)

INSTANCE_LOCK = "gateway.lock"  # in <root>/state: held by the one serve on a root
HTTP_SHUTDOWN_TIMEOUT_S = 5.0  # what requests still open at stop (event streams) get
# Stop as SIGTERM does: a hangup too (the terminal of a foreground serve closed, a kill -HUP
# meant as "reload"; nothing is reloaded), whose default action killed the gateway on the
# spot, its runs going on without it and their threads told nothing
STOP_SIGNALS_OF_SERVE = (signal.SIGHUP,)


@dataclass(frozen=True)
class Provisioned:
    root: RootInfo
    homes: Homes
    registry: AccountRegistry | None
    isolated: bool


def provision(settings: CoreSettings, *, repair_homes: bool = True) -> Provisioned:
    """Create/repair the root, recreate lost accounts, repair homes. Blocking.

    The start-up repair is the shallow entrypoint repair (root, top level, each home's own
    owner and mode); a home's deep walk runs once, when ``Homes.ensure`` first provisions
    that conversation, and its marker (``.permissions-repaired``) records it
    (``jazz-bridge repair --deep`` walks every home again, marker or not).
    """
    isolated = resolve_isolation(settings.isolation)
    blocked = untraversable_ancestor(settings.root) if isolated else None
    if blocked is not None:
        problem = (
            f"{blocked} cannot be traversed by other accounts (mode "
            f"{blocked.stat().st_mode & 0o7777:04o}), so conversation accounts could not reach "
            f"their homes under {Path(settings.root).absolute()}"
        )
        if settings.isolation == "on":
            raise LayoutError(
                f"{problem}: put the root somewhere reachable (e.g. /srv/jazz-bridge) or "
                f"chmod o+x {blocked}"
            )
        log.warning("%s", problem)
        isolated = False
    root = init_root(settings.root, settings.operator_group)
    registry = None
    if isolated:
        registry = AccountRegistry(
            root.layout,
            root.operator_gid,
            (settings.accounts.uid_min, settings.accounts.uid_max),
            kill=kill_accounts,  # before an archived home's account goes, or its uid is reused
        )
        made = registry.recreate_missing()
        if made:
            log.warning("recreated %d conversation account(s) missing from /etc/passwd", len(made))
    else:
        if settings.isolation == "off":
            reason = "isolation is off"
        elif blocked is not None:
            reason = "isolation is impossible under this root"
        else:
            reason = "not running as root"
        log.warning(
            "%s: every conversation runs as the gateway's own account; homes are private "
            "(0700/0600) and not isolated from each other",
            reason,
        )
    if repair_homes:
        report = repair(root, isolated=isolated, registry=registry)
        if not report.ok:
            log.warning("start-up repair had failures: %s", report.as_dict())
    homes = Homes(
        root, isolated=isolated, registry=registry, template=settings.runner.home_template
    )
    return Provisioned(root, homes, registry, isolated)


def make_backend(
    settings: CoreSettings,
    tools_dir: Path | None = None,
    *,
    state_dir: Path | None = None,
    isolated: bool = False,
) -> RunnerBackend:
    """The runner backend serve uses (blocking: it may ask the runner binary what it is).

    Raises :class:`ConfigError` for a daemon backend whose ``jazz`` has no ``jazz daemon``.
    """
    cfg = settings.runner
    if cfg.backend == "daemon":
        from .runner.daemon import DaemonRunner

        if cfg.command or shutil.which("jazz"):  # the jazz that would serve the daemon here
            command, _ = default_command(cfg.command, tools_dir)
            profile = runner_profile(cfg, command, state_dir)
            if not profile.has_daemon:
                raise ConfigError(
                    f'runner.backend = "daemon" needs `jazz daemon`, which {command[0]} '
                    f'({profile.describe()}) does not have: set runner.backend = "cli"'
                )
        return DaemonRunner(cfg)
    command, is_reference = default_command(cfg.command, tools_dir)
    if is_reference:
        log.warning(
            "jazz is not on PATH and runner.command is not set: using the bundled reference "
            "runner (%s), which is NOT an AI; install jazz or set runner.command",
            " ".join(command),
        )
    profile = runner_profile(cfg, command, state_dir)
    log.info("runner %s: %s", command[0], profile.describe())
    unavailable = private_proc_unavailable(isolated)
    hidden = unavailable is None or (isolated and proc_hides_other_uids())
    if not hidden:
        log.warning(
            "runs cannot start in a PID namespace of their own (%s): another conversation's "
            "agent could read a run's command line in /proc%s",
            unavailable,
            "; the released Jazz CLI then gets each message on stdin, where it cannot take "
            "approvals (a run that needs one is stopped and says why)"
            if profile.released
            else "",
        )
    if profile.released and settings.runner.home_template is None:
        log.warning(
            "runner.home_template is not set: the released Jazz CLI fails every run in a new "
            "home with 'No agent found' (a home needs config.json and agents/%s.json)",
            cfg.agent,
        )
    limits = run_limits.from_settings(settings.limits)
    cgroups = None
    if settings.limits.run_cgroup and (limits.memory_bytes or limits.processes):
        cgroups = find_tree(settings.root.absolute())
        if cgroups is None:
            log.info(
                "runs have no cgroup of their own (the host delegates none to the gateway): "
                "their memory and processes are bounded per process and per account only"
            )
        else:
            log.info("each run gets a cgroup of its own: %s", cgroups.describe())
    return CliRunner(
        command,
        kill_grace_s=cfg.kill_grace_s,
        profile=profile,
        private_proc=unavailable is None,
        argv_hidden=hidden,
        default_provider=template_provider(cfg.home_template, cfg.agent),
        cgroups=cgroups,
        run_limits=limits,
    )


class GatewayApp:
    def __init__(self, settings: CoreSettings, specs: dict[str, AdapterSpec]) -> None:
        self.settings = settings
        self.specs = specs
        self.metrics = Metrics()
        self.metrics.watch_store(lambda: self.store.stats if self.store is not None else None)
        self.adapters: list[Adapter] = []
        self.store: Store | None = None
        self.engine: Engine | None = None
        self.web_app: web.Application | None = None
        self.runner: web.AppRunner | None = None
        self.site: PeerLimitedSite | None = None
        self.provisioned: Provisioned | None = None
        self.sweeper: Sweeper | None = None
        self._started = False  # every adapter started (readiness)
        self._instance_lock: int | None = None  # the root's one-gateway lock, held till stop

    @property
    def port(self) -> int:
        assert self.runner is not None
        for addr in self.runner.addresses:
            return int(addr[1])
        raise RuntimeError("server is not listening")

    async def initialize(self) -> None:
        # the rules config check and doctor apply, before anything is made or changed
        rules.require(self.settings, self.specs)
        # the lock before provisioning when the root exists: a second serve must not repair
        # modes or recreate accounts under a running gateway before it is refused
        state = Layout(Path(self.settings.root)).state
        if state.is_dir():
            self._instance_lock = lock_root(state)
        self.provisioned = await asyncio.to_thread(provision, self.settings)
        if self._instance_lock is None:  # a new root: its state directory exists now
            self._instance_lock = lock_root(self.provisioned.root.layout.state)
        self.store = SqliteStore(self.provisioned.root.layout.database)
        await self.store.open()
        backend = await asyncio.to_thread(
            make_backend,
            self.settings,
            self.provisioned.root.layout.tools,
            state_dir=self.provisioned.root.layout.state,
            isolated=self.provisioned.isolated,
        )
        self.engine = Engine(
            self.settings, self.store, self.provisioned.homes, backend, self.metrics, {}
        )
        for spec, section_settings in rules.enabled_adapters(self.settings, self.specs):
            ctx = AdapterContext(
                settings=section_settings,
                core=self.settings,
                gateway=self.engine,
                store=self.store,
                metrics=self.metrics,
            )
            with _adapter_step(spec.name, "be made"):
                adapter = spec.factory(ctx)
            self.adapters.append(adapter)
            self.engine.surfaces[adapter.surface.name] = adapter.surface
        self.web_app = build_app(
            metrics=self.metrics,
            health=self._health,
            ready=self._ready,
            max_body_bytes=self.settings.server.max_body_bytes,
            max_buffered_bytes=self.settings.server.max_buffered_bytes,
            max_requests_per_peer=self.settings.server.max_requests_per_peer,
            before_scrape=self.engine.count_accounts,
            route_platforms=[
                (spec.route_prefix, spec.name) for spec in self.specs.values() if spec.route_prefix
            ],
        )
        for adapter in self.adapters:
            adapter.add_routes(self.web_app)
        operators = Operators(
            self.store,
            self.provisioned.root.layout,
            self.provisioned.isolated,
            size_ttl_s=OPS_SIZE_TTL_S,
            accounts=self.provisioned.registry,
        )
        ops = self.settings.ops
        if ops.token is not None:
            add_ops_routes(self.web_app, operators, ops.token, secure_cookie=ops.secure_cookie)
        self.sweeper = Sweeper(
            self.settings.retention,
            self.store,
            operators,
            self.provisioned.root,
            keeps_today=self.settings.limits.daily_cost_usd is not None,
        )
        for adapter in self.adapters:
            with _adapter_step(adapter.name, "initialize"):
                await adapter.initialize()

    def _health(self) -> dict[str, str | None]:
        return {a.name: a.health() for a in self.adapters}

    def _ready(self) -> bool:
        return bool(
            self.engine and self.engine.started and not self.engine.stopping and self._started
        )

    async def start(self) -> None:
        assert self.engine is not None and self.web_app is not None
        await self.engine.start()
        if self.sweeper is not None:
            self.sweeper.start()
        # shutdown_timeout: how long stop waits for requests still open (an event stream a
        # browser holds); aiohttp's default of 60 s outlasts systemd's stop timeout
        self.runner = make_runner(self.web_app, shutdown_timeout=HTTP_SHUTDOWN_TIMEOUT_S)
        await self.runner.setup()
        server = self.settings.server
        peers = PeerConnections(
            server.max_connections_per_peer,
            lambda _peer: self.metrics.auth_failures.labels("http", "connections").inc(),
        )
        self.site = PeerLimitedSite(self.runner, server.host, server.port, peers)
        await self.site.start()
        for adapter in self.adapters:
            with _adapter_step(adapter.name, "start"):
                await adapter.start()
        self._started = True
        log.info(
            "jazz-bridge listening on http://%s:%d (adapters: %s)",
            self.settings.server.host,
            self.port,
            ", ".join(a.name for a in self.adapters),
        )

    async def stop(self) -> None:
        """Stop intake, stop runs in flight (telling their conversations), release all."""
        grace = self.settings.server.shutdown_grace_s
        if self.engine is not None:
            self.engine.stopping = True
        if self.sweeper is not None:
            await self.sweeper.stop()
        for adapter in self.adapters:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(adapter.stop(), timeout=2)
        if self.engine is not None:
            try:
                await asyncio.wait_for(self.engine.stop(), timeout=grace)
            except TimeoutError:
                log.error("runs did not stop within %.0fs; cutting them off", grace)
                await self.engine.abort()  # it kills what the runs cut off left running
        if self.runner is not None:
            await self.runner.cleanup()
        for adapter in self.adapters:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(adapter.shutdown(), timeout=2)
        if self.store is not None:
            await self.store.close()
        if self._instance_lock is not None:
            os.close(self._instance_lock)
            self._instance_lock = None


@contextlib.contextmanager
def _adapter_step(name: str, step: str) -> Iterator[None]:
    """An adapter's failure at start that it did not turn into a :class:`BridgeError` (a
    library's ValueError at a malformed ``api_url``, a third-party adapter's own bug): one
    line naming the adapter and the error (``serve``'s exit status 2), its traceback in the
    log (secrets masked), instead of a bare Python traceback naming neither."""
    try:
        yield
    except BridgeError:
        raise
    except Exception as exc:
        log.error("the %s adapter could not %s", name, step, exc_info=True)
        raise AdapterError(
            f"the {name} adapter could not {step}: {type(exc).__name__}: {exc} (check the "
            f"[{name}] settings; the traceback is in the log)"
        ) from None


def lock_root(state: Path) -> int:
    """Hold ``state/gateway.lock``: one gateway per root.

    A second ``serve`` on the same root would take the first one's running messages for
    leftovers of a crash (killing their runs, answering "interrupted") before it found its
    port taken, or share the store with it on another port. The lock goes with the process
    (also at kill -9), so a restart after a crash is never refused.
    """
    path = state / INSTANCE_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, STATE_FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise BridgeError(
            f"another jazz-bridge serve is running on this root (it holds {path}); stop it "
            "first, or give this one its own root"
        ) from None
    return fd


def _freeze_startup_heap() -> None:
    """Keep the objects made at start-up out of every later garbage collection.

    The imported libraries (bolt, slack_sdk, python-telegram-bot, pydantic, aiohttp) and
    the gateway's own long-lived objects are several hundred thousand tracked objects; a
    full (generation 2) collection walked them all and stopped the event loop for 45-66 ms
    (measured under bench_intake.py's load), which was the intake's p99. ``gc.freeze`` moves
    them to the permanent generation: later collections walk only what was made since.
    """
    gc.collect()
    gc.freeze()


async def serve(
    settings: CoreSettings,
    specs: dict[str, AdapterSpec],
    stop: asyncio.Event,
    on_locked: Callable[[], None] | None = None,
) -> None:
    """Run until ``stop`` is set (SIGTERM/SIGINT, SIGHUP), then shut down in order.
    ``on_locked``: called once the root is made and this gateway holds it (``serve``
    records the root served there)."""
    app = GatewayApp(settings, specs)
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS_OF_SERVE:
        loop.add_signal_handler(sig, stop.set)

    async def start() -> None:
        await app.initialize()
        if on_locked is not None:
            await asyncio.to_thread(on_locked)
        await app.start()

    starting = asyncio.ensure_future(start())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        # a signal during start-up (an adapter still connecting) stops it too
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()  # start-up's error, if any
            _freeze_startup_heap()
            await stopping
        else:
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
        log.info("stopping: intake closed, stopping runs in flight")
    finally:
        stopping.cancel()
        await app.stop()
        for sig in STOP_SIGNALS_OF_SERVE:
            loop.remove_signal_handler(sig)
