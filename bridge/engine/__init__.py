"""The turn engine: one run at a time per conversation, commands at once, nothing lost.

Intake persists first (``submit`` returns only after the inbox write, so an adapter acks
the platform after it). Commands are answered at once; other messages wait FIFO behind
their conversation's run, within a bound, and behind a fair share of the run slots. A run
starts as the conversation's account; its events become progress and prompts; its outcome
and replies are recorded in one transaction and then delivered. At start, messages that
never ran are run, runs that died with the process get one "interrupted" reply, and
undelivered replies are delivered. A store that cannot write (a full disk) is waited out by
one shared :class:`~bridge.store.StoreRetry` wherever an answer is owed.

One object, :class:`Engine`, does this; it was one 1,800-line class. Its methods are now
split by job into layers, one module each, every layer a class built on the one below,
so a layer may use what is under it and nothing above:

* :mod:`.core` the shared parts and state, and small lookups;
* :mod:`.replies` recording and delivering what the engine says;
* :mod:`.asking` prompts shown, parked and expired;
* :mod:`.answers` presses and typed answers coming back;
* :mod:`.command_answers` answering commands;
* :mod:`.run` one run, executed and recorded;
* :mod:`.turn` a turn's refusals, run slot, home and files;
* :mod:`.intake` submit, dispatch, the per-conversation workers;
* :mod:`.recovery` start-up recovery;
* :mod:`.engine` the whole, built, stopped.

Beside them, the engine's parts: :mod:`.commands` (the command language),
:mod:`.prompts` (how prompts look), :mod:`.scheduler` (fair run slots),
:mod:`.message_queue`, :mod:`.delivery`, :mod:`.progress` and :mod:`.reporter` (live
progress), :mod:`.run_limits`, :mod:`.state` and :mod:`.texts`.
"""

from .engine import Engine
from .state import conversation_name, conversation_prefix, run_person
from .texts import INTERRUPTED_TEXT

__all__ = ["INTERRUPTED_TEXT", "Engine", "conversation_name", "conversation_prefix", "run_person"]
