"""Creating (or repairing) one conversation's home: the directory Jazz uses as JAZZ_HOME.

A home is created with exact modes and owners (docs/design.md "On disk"): isolated, it is
``2750 conv:O`` with its standard subdirectories ``2750``, ``gnupg`` ``0700 conv:conv``,
``config.json`` ``0600`` and a ``personas`` link to the shared personas; in single-account
mode everything is the gateway's, ``0700``/``0600``, without setgid. Every step works on
pinned directory descriptors, so a conversation that swaps entries for links can't make
the gateway touch anything outside its home.

A home made single-account (the gateway's) that an isolated root now gives to an account is
handed over first (:mod:`provisioning.handover`): what the gateway's runs left in it becomes
the account's, before the home directory itself changes hands.

A new home (its first ``ensure``) is seeded from the operator's home template when one is
configured (``runner.home_template``: :mod:`provisioning.template`), before any run sees it;
nothing a home already has is ever replaced. At every ``ensure`` the shared personas are also
linked into ``.jazz/personas``, where the released Jazz CLI reads them.

Every ``ensure`` puts the home, its standard directories, ``gnupg`` and ``config.json`` back
to their exact modes (ACLs dropped). The first ``ensure`` of a home in a process also
applies the home repair, the deep walk of :mod:`provisioning.walk`, unless the home's marker
says a walk under the current rule already ran: a home is walked deeply once (and again
after a restore, a handover or ``repair --deep --force``), not at every start. What a
conversation loosens inside its own home afterwards stays as it is: no other conversation
can pass its home's ``2750``, only the operators' group.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from . import archive, handover, naming, pinned, reclaim
from . import template as seeding
from .accounts import AccountRegistry, current_account
from .archive_lock import home_lock
from .errors import ProvisioningError, UnsafePathError
from .layout import RootInfo
from .modes import (
    CONFIG_FILE,
    CONFIG_FILE_MODE,
    GNUPG_DIR,
    GNUPG_MODE,
    HOME_MODE,
    HOME_SUBDIR_MODE,
    HOME_SUBDIRS,
    PERSONAS_LINK,
    PRIVATE_DIR_MODE,
    PRIVATE_FILE_MODE,
)
from .system_accounts import Account
from .walk import repair_home_tree

log = logging.getLogger(__name__)

INITIAL_CONFIG = b"{}\n"


@dataclass(frozen=True)
class Home:
    """One conversation's home and the identity its runs use."""

    thread_key: str
    name: str
    path: Path
    account: Account
    operator_gid: int
    isolated: bool

    def as_dict(self) -> dict[str, object]:
        return {
            "threadKey": self.thread_key,
            "path": str(self.path),
            "name": self.name,
            "account": self.account.name,
            "uid": self.account.uid,
            "gid": self.account.gid,
            "operatorGid": self.operator_gid,
            "isolated": self.isolated,
        }


class Homes:
    """Makes homes for one root, isolated (an account each) or single-account."""

    def __init__(
        self,
        root: RootInfo,
        *,
        isolated: bool,
        registry: AccountRegistry | None = None,
        template: Path | None = None,
    ) -> None:
        """``template``: the directory (``runner.home_template``) that seeds each new home
        (:mod:`provisioning.template`); None: new homes start empty but for the layout."""
        if isolated and registry is None:
            registry = AccountRegistry(root.layout, root.operator_gid)
        self.root = root
        self.isolated = isolated
        self.registry = registry
        self.template = None if template is None else Path(os.path.abspath(template))
        self._walked: set[str] = set()  # homes whose deep walk ran in this process
        self._walked_lock = threading.Lock()

    def path_for(self, thread_key: str) -> Path:
        return self.root.layout.home(naming.home_name(thread_key))

    def ensure(self, thread_key: str) -> Home:
        """Create or repair the home (and account) of ``thread_key``. Blocking: run off-loop."""
        name = naming.home_name(thread_key)
        # An archived home comes back before anything is built (archive.py). Building holds
        # the home's archive lock shared, so a home is never packed away half-built, and "is it
        # archived?" is asked under that lock: asked before it, an archive landing in
        # between had a fresh empty home built beside its tarball. The account is asked
        # under it too: an archived home's account is reclaimed under the lock held
        # exclusively (reclaim.py), so one asked before could be gone by now.
        restored = False
        while True:
            with home_lock(self.root, name, exclusive=False):
                if not archive.is_archived(self.root.layout, name):
                    home = self._home(thread_key, name)
                    self._build(home)
                    self._walk_once(home, again=restored)
                    return home
            restored = self._restore(thread_key, name) or restored

    def _home(self, thread_key: str, name: str) -> Home:
        if self.isolated:
            assert self.registry is not None
            account = self.registry.ensure(name, thread_key)
        else:
            account = current_account()
        return Home(
            thread_key=thread_key,
            name=name,
            path=self.root.layout.home(name),
            account=account,
            operator_gid=self.root.operator_gid,
            isolated=self.isolated,
        )

    def _restore(self, thread_key: str, name: str) -> bool:
        """Unpack archived ``name``; isolated, with an account again (its files given to
        it when its old uid is another's now). True when this call restored it."""
        if self.registry is None or not self.isolated:
            return archive.restore_if_archived(self.root, name)
        owner = reclaim.restore_owner(self.registry, name, thread_key)
        if not archive.restore_if_archived(self.root, name, owner):
            return False
        self.registry.restored(name)
        return True

    def _walk_once(self, home: Home, *, again: bool) -> None:
        """The home repair, once per home per process (again after a restore). Blocking.

        Failures are logged, not raised: the run goes ahead as it did after a start-up walk
        with failures, and the walk is tried again at the next ``ensure``.
        """
        with self._walked_lock:
            if home.name in self._walked and not again:
                return
        try:
            report = repair_home_tree(
                home.path, setgid_home=home.isolated, owner_uid=home.account.uid
            )
        except (OSError, ProvisioningError) as exc:
            log.warning("home repair of %s did not run: %s", home.path, exc)
            return
        if report.failed:
            log.warning(
                "home repair of %s had %d failure(s): %s",
                home.path,
                report.failed,
                "; ".join(report.errors[:5]),
            )
            return
        if report.changed:
            log.info("home repair of %s changed %d entries", home.path, report.changed)
        with self._walked_lock:
            self._walked.add(home.name)

    def present(self, home: Home) -> bool:
        """Whether ``home``'s directory is still there (not archived since). Blocking.

        Checked under the archive lock: a caller that has recorded its run as started before
        asking is safe, since archiving checks for runs under the same lock.
        """
        with home_lock(self.root, home.name, exclusive=False):
            return os.path.isdir(home.path)

    def present_now(self, home: Home) -> bool | None:
        """:meth:`present` if the lock is free now; None while it is held (an archive or a
        restore of this home is under way), for the caller to wait in :meth:`present`.

        Why: a turn asks before every run, and the answer is an open, a lock and a stat of
        local files (microseconds); handing that to a thread cost more than the check. Only
        the wait for an archive, which can take minutes, needs a thread.
        """
        try:
            with home_lock(self.root, home.name, exclusive=False, wait=False):
                return os.path.isdir(home.path)
        except BlockingIOError:
            return None

    def _build(self, home: Home) -> None:
        layout = self.root.layout
        uid, own_gid, op_gid = home.account.uid, home.account.gid, home.operator_gid
        dir_mode = HOME_MODE if home.isolated else PRIVATE_DIR_MODE
        sub_mode = HOME_SUBDIR_MODE if home.isolated else PRIVATE_DIR_MODE
        file_mode = CONFIG_FILE_MODE if home.isolated else PRIVATE_FILE_MODE
        with pinned.opened_dir(layout.chats) as chats_fd:
            seed = self.template is not None and seeding.is_new(chats_fd, home.name)
            if home.isolated:
                self._hand_over(home, chats_fd)
            try:
                home_fd = pinned.ensure_dir(
                    chats_fd, home.name, dir_mode, uid, op_gid, drop_acl=True
                )
            except UnsafePathError as exc:
                raise UnsafePathError(
                    f"{home.path} is a symbolic link or not a directory; move it away and "
                    "run jazz-bridge homes ensure again"
                ) from exc
        try:
            if seed:  # before anything is in it: a crash from here on is finished next time
                seeding.mark_pending(home_fd, str(home.path))
            for sub in HOME_SUBDIRS:
                self._subdir(home, home_fd, sub, sub_mode, uid, op_gid)
            self._subdir(
                home,
                home_fd,
                GNUPG_DIR,
                GNUPG_MODE if home.isolated else PRIVATE_DIR_MODE,
                uid,
                own_gid if home.isolated else op_gid,
            )
            self._personas_link(home_fd, str(layout.personas))
            if self.template is not None and seeding.pending(home_fd):
                # before config.json's default: the template's own lands instead
                seeding.seed(
                    self.template,
                    home_fd,
                    str(home.path),
                    uid=uid,
                    gid=op_gid,
                    isolated=home.isolated,
                )
            self._config(home, home_fd, file_mode, uid, op_gid)
            seeding.link_shared_personas(
                home_fd,
                str(home.path),
                layout.personas,
                uid=uid,
                gid=op_gid,
                isolated=home.isolated,
            )
        finally:
            os.close(home_fd)

    @staticmethod
    def _hand_over(home: Home, chats_fd: int) -> None:
        """Finish (or start) the handover of a home the gateway's own account made.

        Runs before the home directory is given to the account, so the home's owner (or the
        handover's marker, written first) says that a handover is due until one succeeds.
        A walk with failures is logged and tried again at the next ensure.
        """
        try:
            home_fd = pinned.open_dir(home.name, chats_fd)
        except (FileNotFoundError, UnsafePathError):
            return  # a new home, or a link that ensure_dir refuses with its own message
        try:
            handover.hand_over(
                home_fd,
                str(home.path),
                uid=home.account.uid,
                gid=home.operator_gid,
                gateway_uid=os.geteuid(),
            )
        finally:
            os.close(home_fd)

    @staticmethod
    def _subdir(home: Home, home_fd: int, sub: str, mode: int, uid: int, gid: int) -> None:
        try:
            os.close(pinned.ensure_dir(home_fd, sub, mode, uid, gid, drop_acl=True))
        except UnsafePathError:
            # The conversation replaced it with a link or file: never follow, say so.
            log.warning("%s/%s is not a directory (link or file); left alone", home.path, sub)

    @staticmethod
    def _personas_link(home_fd: int, target: str) -> None:
        try:
            current = os.readlink(PERSONAS_LINK, dir_fd=home_fd)
        except FileNotFoundError:
            os.symlink(target, PERSONAS_LINK, dir_fd=home_fd)
            return
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # exists and is not a link: the conversation's own
                return
            raise
        if current != target:
            os.unlink(PERSONAS_LINK, dir_fd=home_fd)
            os.symlink(target, PERSONAS_LINK, dir_fd=home_fd)

    @staticmethod
    def _config(home: Home, home_fd: int, mode: int, uid: int, gid: int) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(CONFIG_FILE, flags, mode, dir_fd=home_fd)
        except FileExistsError:
            st = os.stat(CONFIG_FILE, dir_fd=home_fd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == uid and stat.S_IMODE(st.st_mode) != mode:
                pinned.chmod_entry(home_fd, CONFIG_FILE, mode, st)
            return
        try:
            os.write(fd, INITIAL_CONFIG)
            os.fchown(fd, uid, gid)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
