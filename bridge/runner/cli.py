"""The CLI backend: one ``jazz run --json`` process per message, in the binary's dialect.

Which CLI ``runner.command`` is (documented or released, :mod:`.dialect`) is found once at
start. The documented CLI gets the chat text as a JSON line on stdin; the released one as
its positional argument after ``--`` (so text starting with ``-`` stays the prompt), which
is the only way it takes approvals on stdin: so that no other conversation reads it in
``/proc/<pid>/cmdline``, each such run starts in a PID namespace with a private ``/proc``
(:mod:`provisioning.private_proc`), or, isolated under a ``/proc`` that already hides
other accounts' processes (systemd's ``ProtectProc=invisible``), as it is. Where neither
holds, or the text is too long for an argument, the released CLI reads it from stdin,
closed at once, and a run that then needs an approval is stopped with a reply saying why.
Stdin is closed once the envelope is read (the released CLI waits for that after an
approval).

Progress comes as NDJSON on stderr (the released CLI's events put in the documented shapes
here), one envelope on stdout. The process runs as the conversation's account, in its own
session; a timeout (the gateway's own clock, paused while a person is being asked: the
released CLI's ``--timeout`` would count that time, so it gets a long one) or ``/stop``
ends it with SIGTERM, then SIGKILL for the whole run after the grace, including children
that left the group. Single-account runs without a namespace start behind a subreaper of
their own (:mod:`.reaper`).

This module is the backend itself: it prepares a run (its working directory, its
cgroup), builds its command line (:mod:`.cli_argv`) and environment, starts it and hands
back a :class:`.cli_handle.CliRunHandle`, whose output :mod:`.cli_streams` reads and whose
result :mod:`.cli_result` assembles. The program and interpreter come from
:mod:`.command`.
"""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import replace

from provisioning import gate
from provisioning.cgroups import CgroupError, CgroupTree, RunCgroup
from provisioning.errors import ProvisioningError, RlimitsUnavailable
from provisioning.rlimits import RunLimits
from provisioning.sandbox import RunIdentity, hide_from_own_account

from ..errors import RunnerError
from . import killer
from .base import RunHandle, RunnerBackend, RunRequest
from .cli_argv import PromptMode, prompt_mode, run_argv
from .cli_handle import CliRunHandle
from .command import shared_interpreter
from .dialect import DOCUMENTED_ASSUMED, CliProfile
from .procs import RUN_TAG_ENV, Sweeps
from .reaper import wrap
from .spawn import start_process


class CliRunner(RunnerBackend):
    name = "cli"
    runs_in_workspace = True  # run_identity's cwd

    def __init__(
        self,
        command: Sequence[str],
        *,
        kill_grace_s: float = 3.0,
        profile: CliProfile = DOCUMENTED_ASSUMED,
        private_proc: bool = False,
        argv_hidden: bool | None = None,
        default_provider: str | None = None,
        cgroups: CgroupTree | None = None,
        run_limits: RunLimits | None = None,
    ) -> None:
        if not command:
            raise RunnerError("runner.command is empty")
        # a cgroup per run (provisioning/cgroups.py) where the host lets the gateway make
        # them: ``run_limits``' memory and process counts over the whole run, not per
        # process or per uid as the rlimits count them
        self.cgroups = cgroups
        self.run_limits = run_limits or RunLimits()
        self.command = list(command)
        self.kill_grace_s = kill_grace_s
        self.profile = profile
        # a run whose prompt is on argv starts in a PID namespace with a private /proc
        # (probed by the caller); argv_hidden: no other conversation can read a run's
        # command line, by that namespace or by the host's /proc (hidepid, isolated runs)
        self.private_proc = private_proc
        self.argv_hidden = private_proc if argv_hidden is None else argv_hidden
        # the model provider of runner.agent in the home template (runs that never said)
        self.default_provider = default_provider
        self.sweeps = Sweeps()  # finished runs' leftovers, one /proc scan for many
        self._found = False

    def prompt_mode(self, request: RunRequest) -> PromptMode:
        """Where the prompt goes (:func:`.cli_argv.prompt_mode`)."""
        return prompt_mode(self.profile, self.argv_hidden, request)

    def argv(self, request: RunRequest, mode: PromptMode = "json") -> list[str]:
        """The run's command line in this CLI's dialect (:func:`.cli_argv.run_argv`)."""
        return run_argv(self.command, self.profile, request, mode)

    async def start(self, request: RunRequest) -> RunHandle:
        tag = request.kill_tag or secrets.token_hex(12)
        try:
            workdir, cgroup = await asyncio.to_thread(self._prepare, request.identity, tag)
        except CgroupError as exc:
            raise RunnerError(f"cannot start the run in a cgroup of its own: {exc}") from exc
        except (ProvisioningError, OSError) as exc:
            raise RunnerError(f"cannot open the run's home {request.home.path}: {exc}") from exc
        try:
            return await self._spawn(request, tag, workdir, cgroup)
        except BaseException:
            if cgroup is not None:
                await asyncio.to_thread(cgroup.close)
            raise

    def _prepare(self, identity: RunIdentity, tag: str) -> tuple[int, RunCgroup | None]:
        """The run's working directory (a descriptor) and its cgroup. Blocking."""
        cgroup = None
        # the child enters its cgroup before its identity switch; a switch done by Popen
        # itself (no setpriv) comes before exec, and the child could no longer enter
        enters = identity.uid is None or identity.setpriv is not None
        if self.cgroups is not None and enters:
            cgroup = self.cgroups.make(f"run-{tag}", self.run_limits)
        try:
            return identity.open_workdir(), cgroup
        except BaseException:
            if cgroup is not None:
                cgroup.close()
            raise

    async def _spawn(
        self, request: RunRequest, tag: str, workdir: int, cgroup: RunCgroup | None
    ) -> RunHandle:
        mode = self.prompt_mode(request)
        # only a prompt on argv needs hiding: the rest of a command line names nobody
        identity = replace(request.identity, private_proc=mode == "argv" and self.private_proc)
        try:
            kwargs = identity.popen_kwargs(workdir)
            kwargs["env"] = {**kwargs["env"], RUN_TAG_ENV: tag}
            self._check_command(kwargs["env"].get("PATH"))
            argv = identity.command(self.argv(request, mode))
            if identity.uid is None:
                hide_from_own_account()  # the run's uid is ours: /proc/<our pid>/environ
            if identity.uid is None and not identity.private_proc and cgroup is None:
                # single account, no namespace, no cgroup: the uid sweep cannot find all of
                # a run; the gateway's own Python may sit where its runs cannot reach (a
                # root pyenv). With a cgroup the kernel knows every process of the run.
                argv = wrap(argv, self.kill_grace_s, shared_interpreter())
            procs_files = cgroup.procs_files if cgroup is not None else []
            gates = gate.needed(identity.limits, procs_files)
            opened = None
            if gates:  # outermost: nothing runs before its limits, all born in its cgroup
                argv = gate.gated(argv, procs_files)
                opened = functools.partial(gate.open_gate, limits=identity.limits)
            proc = await start_process(argv, opened, **kwargs)
        except (FileNotFoundError, PermissionError) as exc:
            raise RunnerError(
                f"cannot start the runner {self.command[0]!r}: {exc.strerror}; check runner.command"
            ) from exc
        except RlimitsUnavailable as exc:
            raise RunnerError(f"cannot start the runner under its limits: {exc}") from exc
        finally:
            os.close(workdir)  # the child has its own copy (entered before it ran)
        handle = CliRunHandle(
            proc,
            request,
            tag,
            self.kill_grace_s,
            self.sweeps,
            profile=self.profile,
            prompt_mode=mode,
            private_proc=identity.private_proc,
            argv_hidden=self.argv_hidden,
            default_provider=self.default_provider,
            cgroup=cgroup,
        )
        await handle.begin()
        return handle

    async def close(self) -> None:
        await self.sweeps.close()
        if self.cgroups is not None:
            await asyncio.to_thread(self.cgroups.close)
        await asyncio.to_thread(killer.close)  # its helper, if isolated runs started it

    def _check_command(self, path: str | None) -> None:
        """A runner that is not there is a clear error, also behind ``setpriv`` (whose own
        failure to exec would only read as a run without an envelope). Checked until found."""
        if self._found:
            return
        program = self.command[0]
        found = shutil.which(program, path=path) if os.sep not in program else program
        if found is None or not os.access(found, os.X_OK):
            raise RunnerError(
                f"cannot start the runner {program!r}: not found or not executable; "
                "check runner.command"
            )
        self._found = True
