"""The core's sections of the configuration (``[server]``, ``[runner]``, ``[limits]``...),
each key with its default and its bounds.

Each section is a frozen model refusing unknown keys, so a mistyped key is named at start,
not ignored; adapter sections (``[slack]``, ``[telegram]``, ``[web]``) are declared by the
adapters' specs on the same :class:`Section` base.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from ..logs import SECRET_VALUES
from .types import ExistingDir, FilePath, HttpUrl, Token


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSettings(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=0, le=65535)
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    # every body being read at once, together (never under max_body_bytes), and requests
    # under way from one peer (a TLS proxy in front is one peer: keep room for its traffic)
    max_buffered_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    max_requests_per_peer: int = Field(default=256, ge=1)
    # connections open from one address (each costs a descriptor whether it sends or not);
    # 0: no limit. Behind a proxy, room for every connection it may open.
    max_connections_per_peer: int = Field(default=512, ge=0)
    shutdown_grace_s: float = Field(default=8.0, gt=0, le=60)


class RunnerSettings(Section):
    backend: Literal["cli", "daemon"] = "cli"
    command: list[str] | None = None  # default: `jazz` on PATH, else the reference runner
    agent: str = "default"
    # seeds each new conversation's home: config.json, agents/, personas/ (README)
    home_template: ExistingDir | None = None
    approval_policy: Literal["read-only", "low-risk", "high-risk"] = "low-risk"
    timeout_s: float = Field(default=900.0, gt=0)
    kill_grace_s: float = Field(default=3.0, ge=0, le=30)
    events: list[str] = ["tools", "reasoning", "text", "approval", "subagent", "spend"]
    env_passthrough: list[str] = []
    # passed to every run: provider keys (OPENAI_API_KEY...), so every value is a secret
    extra_env: Annotated[dict[str, str], SECRET_VALUES] = {}
    daemon_url: HttpUrl = "http://127.0.0.1:4747"
    daemon_token: SecretStr | None = None
    daemon_operator_token: SecretStr | None = None
    daemon_poll_s: float = Field(default=0.5, gt=0)


class LimitsSettings(Section):
    max_concurrent_runs: int = Field(default=4, ge=1)
    # runs one person, and one team or chat (bridge.model.thread_group), may have going at
    # once: each at most max_concurrent_runs (a larger value means that); 0: no cap of its
    # own. A run waiting for its person's answer still counts for the person, not the team
    max_runs_per_user: int = Field(default=2, ge=0)
    max_runs_per_team: int = Field(default=3, ge=0)
    max_queued_per_conversation: int = Field(default=5, ge=0)
    daily_cost_usd: float | None = Field(default=None, ge=0)
    max_attachment_bytes: int = Field(default=20 * 1024 * 1024, ge=0)
    # a prompt nobody answers this long is declined for the agent (a run waiting for its
    # person still counts against that person's max_runs_per_user); None: wait for ever
    prompt_wait_s: float | None = Field(default=3600.0, gt=0)
    # what one run may use (provisioning/rlimits.py); 0: the gateway's own limit. Processes
    # (and threads) count per conversation account: isolated runs only. Memory (address
    # space), CPU seconds and file size bound each process of a run
    run_max_processes: int = Field(default=512, ge=0)
    run_max_memory_bytes: int = Field(default=8 * 1024**3, ge=0)
    run_max_cpu_s: int = Field(default=1800, ge=0)
    run_max_file_bytes: int = Field(default=2 * 1024**3, ge=0)
    # a cgroup per run where the host lets the gateway make one (provisioning/cgroups.py):
    # run_max_memory_bytes and run_max_processes then also bound the whole run together
    run_cgroup: bool = True


class ProgressSettings(Section):
    first_after_s: float = Field(default=1.0, ge=0)
    still_working_every_s: float = Field(default=60.0, gt=0)


class AccountsSettings(Section):
    uid_min: int = Field(default=70000, ge=1000)
    uid_max: int = Field(default=79999, ge=1000)
    # new conversations (each one an account, kept) one person, and one team or chat, may
    # start in 24 hours; 0: no limit
    new_per_user_per_day: int = Field(default=50, ge=0)
    new_per_team_per_day: int = Field(default=500, ge=0)


class LogSettings(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # "auto": JSON lines when stderr is not a terminal (journald, containers), text on one
    format: Literal["auto", "json", "text"] = "auto"
    file: FilePath | None = None
    max_bytes: int = Field(default=10 * 1024 * 1024, ge=4096)
    backups: int = Field(default=3, ge=0)


class OpsSettings(Section):
    token: Token | None = None  # the operator web view at /ops is off without it
    # mark the login cookie Secure (sent over https only) also when the request came in as
    # plain http: set it when /ops is reached through a TLS-terminating proxy
    secure_cookie: bool = False


class RetentionSettings(Section):
    records_days: float = Field(default=90.0, gt=0)
    sweep_every_s: float = Field(default=3600.0, gt=0)
    archive_idle_days: float | None = Field(default=None, gt=0)
