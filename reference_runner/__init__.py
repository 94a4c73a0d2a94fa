"""The reference runner: speaks the ``jazz run --json`` contract, and is not an AI.

Why it exists: the real ``jazz`` is a TypeScript/Bun program that cannot be installed on
every machine. jazz-bridge ships this stand-in so that ``jazz-bridge serve`` works on a
fresh machine, and so that tests can drive every path of the contract
(``docs/runner-contract.md``): events, approvals, questions, secrets, artifacts,
failures, crashes, timeouts, signals and leftover processes. It says plainly in every
answer that it is not an AI. It is a program of its own, not a part of the gateway: it is
stdlib-only (no third-party import, so it starts fast and can be copied next to the homes
as one file, see :mod:`.bundle`, and started by conversation accounts with any Python
3.11+), and it never imports ``bridge``, ``adapters`` or ``provisioning``.

Invocation (the chat text never goes on argv)::

    jazz-reference-runner run --json --no-tui --agent AGENT --conversation KEY
        --approval-policy read-only|low-risk|high-risk
        --events tools,reasoning,text,approval,subagent,spend
        --interactive-stdin --input-stdin --timeout MS
        [--ephemeral] [--park] [--auto-approve-tools a,b] [--timezone TZ]
        [--max-iterations N] [--max-cost-usd X] [--max-tokens N] [--max-duration-ms N]
        [--data-dir PATH]

(also ``python -m reference_runner``, ``python path/to/reference_runner`` and
``python jazz-reference-runner.pyz``). ``--timezone`` and the ``--max-*`` caps are checked
for shape and otherwise ignored; ``--auto-approve-tools`` approves those tools without
asking, and ``--approval-policy read-only`` declines every approval without asking;
without ``--interactive-stdin`` every prompt for a person counts as unanswered.

The first stdin line is ``{"prompt": "..."}`` (``"history"`` only with ``--ephemeral``,
``"attachments"`` a list of paths). Later stdin lines are answer frames
(``approval_decision``, ``user_input_response``, ``user_secret_response``) and may come at
any time. History lives in ``$JAZZ_HOME/history/<safe key>.json`` (``--data-dir``
overrides ``JAZZ_HOME``), written atomically with Jazz's modes: 0600/0700, or 0640/0750
where the directory written into has the setgid bit. Events go to stderr as NDJSON, only
for the requested categories; ``error``, ``log``, the usage events (``stream_start``,
``usage_update``, ``complete``) and the prompts for a person always come, and so does one
line of log noise that is not JSON. One envelope goes to stdout, last. Time spent waiting
for a person does not count against ``--timeout``. SIGTERM/SIGINT print an
``interrupted`` envelope and exit 143/130. Exit codes: 0 answer, 1 failure, 2 parked
(``--park``), 3 ``!crash``.

Without directives the answer says it is the reference runner, quotes the prompt (at most
``ECHO_MAX_CHARS`` of it) and counts the conversation's earlier turns. A home the run cannot
write is a failure naming it before anything else happens. Directives in the prompt steer
it; :mod:`.directives` lists them.

Modules, one job each: :mod:`.cli` (``main``: one run from flags to exit code),
:mod:`.args` (the flags), :mod:`.contract` (the contract's names and how a run ends),
:mod:`.output` (stdout and stderr: events and the one envelope), :mod:`.stdin` (the first
line and the answer frames), :mod:`.clock` (the timeout clock), :mod:`.home` (history and
files with Jazz's modes), :mod:`.run` (one turn and its envelopes), :mod:`.directives` (what
a prompt can ask for), :mod:`.pretend` (pretend agent work), :mod:`.people` (approvals,
questions, secrets), :mod:`.faults` (failures on demand), :mod:`.media` (artifact bytes),
:mod:`.bundle` (the one-file copy for conversation accounts).
"""
