"""Prometheus metrics of one gateway instance, on its own registry (tests run several).

prometheus-client is used rather than hand-written exposition: it gets the text format,
escaping and histogram buckets right and is what scrapers expect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from .store.base import StoreStats

RUN_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.messages = Counter(
            "jazz_bridge_messages",
            "Inbound messages by platform and outcome (accepted, duplicate, denied, ignored, "
            "malformed: signed or with the secret, but not a shape the platform sends; "
            "unreachable: accepted, then not run as its chat takes no more of the bot's messages).",
            ["platform", "outcome"],
            registry=r,
        )
        self._message_counts: dict[tuple[str, str], Counter] = {}  # see count_message
        self.auth_failures = Counter(
            "jazz_bridge_auth_failures",
            "Requests refused at the door by platform and reason (signature, missing, stale, "
            "secret, token (wrong, missing, or refused for too many wrong ones, 429); too_big: "
            "a body over server.max_body_bytes, or a web chat file over "
            "limits.max_attachment_bytes, answered 413; "
            "connections: one over server.max_connections_per_peer).",
            ["platform", "reason"],
            registry=r,
        )
        self.runs = Counter(
            "jazz_bridge_runs", "Finished runs by outcome, once recorded.", ["outcome"], registry=r
        )
        self.run_duration = Histogram(
            "jazz_bridge_run_duration_seconds",
            "Duration of runs, start to envelope.",
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "jazz_bridge_queue_depth", "Messages accepted and waiting for their turn.", registry=r
        )
        self.runs_in_flight = Gauge(
            "jazz_bridge_runs_in_flight", "Runs currently executing.", registry=r
        )
        self.accounts_used = Gauge(
            "jazz_bridge_accounts_used",
            "Uids of accounts.uid_min..uid_max that conversation accounts hold (isolated; "
            "kept while their conversation is archived).",
            registry=r,
        )
        self.accounts_capacity = Gauge(
            "jazz_bridge_accounts_capacity",
            "Uids in accounts.uid_min..uid_max: no new conversation starts once all are held.",
            registry=r,
        )
        self.replies = Counter(
            "jazz_bridge_replies",
            "Replies by surface and result (sent, confirmed, retried, failed; "
            "resent_unconfirmed: a try after one that may have landed, on a surface that "
            "cannot look it up, so it may show twice).",
            ["surface", "result"],
            registry=r,
        )

    def count_message(self, platform: str, outcome: str) -> None:
        """One inbound message counted in ``messages``. The labelled child is looked up once
        per (platform, outcome): ``labels()`` builds its key and takes a lock on each call,
        which was ~1% of the intake's CPU per event."""
        child = self._message_counts.get((platform, outcome))
        if child is None:
            child = self._message_counts[(platform, outcome)] = self.messages.labels(
                platform, outcome
            )
        child.inc()

    def watch_store(self, stats: Callable[[], StoreStats | None]) -> None:
        """Export the store's commits and writes (read at each scrape)."""
        self.registry.register(_StoreCollector(stats))

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))


class _StoreCollector(Collector):
    """The store's own counters, read when scraped (the store counts on its thread)."""

    def __init__(self, stats: Callable[[], StoreStats | None]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats() or StoreStats()
        yield CounterMetricFamily(
            "jazz_bridge_store_commits",
            "Durable store transactions (each waits for one disk flush); a group commit "
            "holds several writes.",
            value=stats.commits,
        )
        yield CounterMetricFamily(
            "jazz_bridge_store_writes", "Store writes, each in some commit.", value=stats.writes
        )

    def describe(self) -> Iterator[Metric]:
        return iter(())
