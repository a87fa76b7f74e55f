"""One session file, its derived store and configuration: what every /context command works on."""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec

from ds4_context_core import CanonicalMessage, ModelDescriptor, RuntimeHistorySnapshot
from ds4_context_core.config import DEFAULT_WRITE_TOOLS, ConfigLoadResult, load_config
from ds4_context_core.planner import ContextPlan, PlanState, SupplementalItem, plan_context
from ds4_context_core.summaries import SUMMARY_DEFAULT_MAX_CHARS, SummaryOutcome
from ds4_context_core.tokens import TokenCalibration, calibration_prior
from ds4_context_engine._exceptions import CommandError, DerivedStoreError
from ds4_context_engine.commands._calibrate import (
    CalibrationScan,
    calibration_profile,
    record_calibration_samples,
    stored_calibration,
)
from ds4_context_engine.commands._digest import (
    SettledPlan,
    TaskDigestReader,
    cut_messages,
    settle_cut_supplements,
)
from ds4_context_engine.commands._llm_summary import SUMMARY_TIMEOUT_S, summarize_cut, summary_supplements
from ds4_context_engine.commands._overhead import MessagePrefix, usage_overhead
from ds4_context_engine.commands._retrieval import (
    RETRIEVAL_HITS_DEFAULT,
    retrieval_candidates,
    retrieved_supplements,
)
from ds4_context_engine.pi import PiContext, PiSession, PiSessionView
from ds4_context_engine.store import (
    DerivedStore,
    MemoryItem,
    PinRecord,
    StoredSummary,
    is_store_url,
    replay_session_events,
)

if TYPE_CHECKING:
    from ds4_context_core.adapter import CompletionRequest
    from ds4_context_core.config import Ds4ContextConfig
    from ds4_context_core.privacy import PrivacyPolicy

__all__ = ["DEFAULT_STORE_ENV", "ContextWorkspace", "default_store_location", "default_store_path"]

DEFAULT_STORE_ENV: Final = "DS4_CONTEXT_STORE"
# Below the summaries' 75: retrieved excerpts in front follow the summaries and are dropped first.
RETRIEVED_FRONT_PRIORITY: Final = 70
_DIGEST_READERS: Final = 4  # digest readers kept, for the cuts the planning passes of a step try


def default_store_path() -> Path:
    """``$DS4_CONTEXT_STORE``, else ``$XDG_CACHE_HOME/ds4-context/derived.sqlite3`` (``~/.cache`` default)."""
    explicit = os.environ.get(DEFAULT_STORE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "ds4-context" / "derived.sqlite3"


def default_store_location() -> str | Path:
    """``$DS4_CONTEXT_STORE`` as given when it is a ``postgresql://`` URL, else :func:`default_store_path`."""
    explicit = os.environ.get(DEFAULT_STORE_ENV, "")
    return explicit if is_store_url(explicit) else default_store_path()


def _check_retrieval_hits(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CommandError("command-argument-invalid", "retrieval_hits must be an int >= 0")


class ContextWorkspace:
    """A Pi session file opened for inspection and planning.

    The session is re-read incrementally (only appended bytes) when the file grows; the store is
    indexed incrementally the same way. ``store=None`` works without any derived state.
    """

    def __init__(
        self,
        session_path: str | os.PathLike[str],
        *,
        store: DerivedStore | None = None,
        config: Ds4ContextConfig | Mapping[str, Any] | None = None,
        model: ModelDescriptor | None = None,
        leaf_id: str | None = None,
        trusted_roots: Sequence[str | os.PathLike[str]] | None = None,
        privacy_policy: PrivacyPolicy | None = None,
        retrieval_hits: int = RETRIEVAL_HITS_DEFAULT,
        task_digest: bool = True,
    ) -> None:
        _check_retrieval_hits(retrieval_hits)
        self.retrieval_hits = retrieval_hits
        self.task_digest = bool(task_digest)
        self.session_path = Path(session_path)
        self.store = store
        # without a configuration nothing is validated (nor pydantic imported) until one is asked for:
        # the planner and the privacy policy have the same defaults of their own
        self._config_result: ConfigLoadResult | None = None if config is None else load_config(config)
        # the policy given here, else the configuration's privacy section; without either, the default
        # policy is made on first read (its module compiles the secret rules, which a plan never runs)
        self._privacy_policy: PrivacyPolicy | None = (
            privacy_policy
            if privacy_policy is not None or self._config_result is None
            else self.config.privacy.to_policy()
        )
        self.model = model
        self.leaf_id = leaf_id
        # the file it was read from is remembered, so a refresh trusts the prefix only of that same file
        self._view = PiSessionView(self.session_path)
        self._session = self._view.refresh()
        # the user pointed at this file, so by default its own project is the trusted root
        self.trusted_roots: tuple[str | os.PathLike[str], ...] = (
            tuple(trusted_roots) if trusted_roots is not None else (self._session.header.cwd,)
        )
        self._context: PiContext | None = None
        self._indexed = False
        self._plan_state: PlanState | None = None
        self._plan: ContextPlan | None = None
        self._plan_key: tuple[Any, ...] | None = None
        self._settled: SettledPlan | None = None
        self._settled_version = 0  # the summaries version ``_settled`` was built with
        # What the supplements of the previous plan took: the room their rebuilt ones are planned with.
        self._supplement_tokens = 0
        # the task digest's reader, kept from plan to plan: a compaction feeds it what it newly cut only
        self._digests: TaskDigestReader | None = None
        self._prefix = MessagePrefix()  # the branch's running token sums, for the measured overhead
        self._candidates: tuple[tuple[Any, ...], tuple[tuple[CanonicalMessage, str], ...]] | None = None
        self._summaries_version = 0  # counts summaries remembered by this workspace
        self._local_summaries: dict[str, StoredSummary] = {}  # without a store
        self._summary_items: tuple[tuple[Any, ...], tuple[SupplementalItem, ...]] | None = None
        self._calibration_handled: set[str] = set()
        self._calibration_scan = CalibrationScan()
        self._calibrations: dict[str, TokenCalibration] = {}
        self._published_calibrations: dict[str, TokenCalibration] = {}  # the step hysteresis starts here
        # the system prompt and tools every request carries: set by a host that knows them (for example
        # ``request_overhead_tokens``); ``None`` measures them from the usage the session recorded
        self.fixed_tokens: int | None = None
        self.fixed_tokens_source = "none"

    @classmethod
    def open(
        cls,
        session_path: str | os.PathLike[str],
        *,
        store_path: str | os.PathLike[str] | None = None,
        no_store: bool = False,
        config: Ds4ContextConfig | Mapping[str, Any] | None = None,
        model: ModelDescriptor | None = None,
        leaf_id: str | None = None,
        trusted_roots: Sequence[str | os.PathLike[str]] | None = None,
        privacy_policy: PrivacyPolicy | None = None,
        retrieval_hits: int = RETRIEVAL_HITS_DEFAULT,
        task_digest: bool = True,
    ) -> ContextWorkspace:
        """Open a session with the store at ``store_path`` (default :func:`default_store_location`).

        ``store_path`` is a SQLite file or a ``postgresql://`` URL (``ds4_context_engine.store.open_store``).

        ``no_store=True`` works from the session file alone: pins and memory are replayed from its
        events, the commands that report on the store itself are unavailable and no history is retrieved.
        ``retrieval_hits`` caps the retrieved-history supplements of a plan (0 turns retrieval off);
        ``task_digest`` adds the task digest of what a plan cuts. ``privacy_policy`` overrides the
        configuration's ``privacy`` section.
        """
        _check_retrieval_hits(retrieval_hits)
        if no_store:
            store = None
        else:
            from ds4_context_engine.store import open_store  # noqa: PLC0415 - sqlite3/psycopg only when used

            store = open_store(store_path or default_store_location())
        try:
            return cls(
                session_path,
                store=store,
                config=config,
                model=model,
                leaf_id=leaf_id,
                trusted_roots=trusted_roots,
                privacy_policy=privacy_policy,
                retrieval_hits=retrieval_hits,
                task_digest=task_digest,
            )
        except BaseException:
            if store is not None:
                store.close()  # the workspace that would own it never came to be
            raise

    @property
    def privacy_policy(self) -> PrivacyPolicy:
        """The policy a request from this workspace is sanitized with (see :meth:`open`)."""
        if self._privacy_policy is None:
            from ds4_context_core.privacy import PrivacyPolicy  # noqa: PLC0415 - see __init__

            self._privacy_policy = PrivacyPolicy()
        return self._privacy_policy

    @privacy_policy.setter
    def privacy_policy(self, policy: PrivacyPolicy) -> None:
        self._privacy_policy = policy

    @property
    def config_result(self) -> ConfigLoadResult:
        """The configuration and what loading it rejected (without one, the defaults and no warnings)."""
        if self._config_result is None:
            self._config_result = load_config(None)
        return self._config_result

    @property
    def config(self) -> Ds4ContextConfig:
        from ds4_context_core.config import Ds4ContextConfig  # noqa: PLC0415 - pydantic, when asked for

        config = self.config_result.config
        assert isinstance(config, Ds4ContextConfig)
        return config

    @property
    def session(self) -> PiSession:
        """The session as of the last :meth:`refresh` (or opening)."""
        return self._session

    def refresh(self) -> PiSession:
        """Pick up appended lines (only the new bytes are read) and index them in the store.

        While the path names the file read before (same regular file, same header line) only appended
        bytes are read; otherwise the file is read whole as at opening (a symlink is refused).
        """
        session = self._view.refresh()
        self._session = session
        self._context = None
        self.ensure_indexed(force=True)
        return self._session

    def ensure_indexed(self, *, force: bool = False) -> None:
        if self.store is not None and (force or not self._indexed):
            self.store.index_file(self.session_path)
            self._indexed = True
            self._context = None
            self._record_calibration_samples()

    def _record_calibration_samples(self) -> None:
        """Token calibration samples from the usage this session records (each stored once)."""
        assert self.store is not None
        scan = record_calibration_samples(self.store, self._session, handled=self._calibration_handled)
        self._calibrations.clear()  # read again at the next plan: this pass or another process may have added
        # each entry is settled once per workspace, so the counts add up across refreshes
        before = self._calibration_scan
        skipped = dict(before.skipped)
        for code, count in scan.skipped.items():
            skipped[code] = skipped.get(code, 0) + count
        self._calibration_scan = CalibrationScan(
            usage_messages=scan.usage_messages,
            recorded=before.recorded + scan.recorded,
            already_recorded=before.already_recorded + scan.already_recorded,
            skipped=dict(sorted(skipped.items())),
        )

    @property
    def calibration_scan(self) -> CalibrationScan:
        """What this workspace's passes over the session's usage did (counts only; empty before indexing).

        ``usage_messages`` is the latest count of assistant messages carrying usage; ``recorded``,
        ``already_recorded`` and ``skipped`` (by code) add up every pass since the workspace opened.
        """
        return self._calibration_scan

    def calibration(self, model: ModelDescriptor | None = None) -> TokenCalibration | None:
        """Core's calibration of the samples stored for ``model`` (default: the workspace's model).

        ``None`` without a store or a model, or when the store cannot be read; a ``TokenCalibration``
        with status ``insufficient-samples`` (ratio 1) when it holds fewer than core's minimum.
        """
        descriptor = model or self.model
        if self.store is None or descriptor is None:
            return None
        self.ensure_indexed()
        profile = calibration_profile(descriptor.provider, descriptor.id)
        calibration = self._calibrations.get(profile)
        if calibration is None:
            try:
                previous = self._published_calibrations.get(profile)
                calibration = stored_calibration(self.store, profile, previous=previous)
            except DerivedStoreError:
                return None
            self._calibrations[profile] = calibration
            if calibration.status == "calibrated":
                self._published_calibrations[profile] = calibration
        return calibration

    def pins(self) -> tuple[PinRecord, ...]:
        """Current pins: from the store when there is one, else replayed from the session's events."""
        if self.store is None:
            return replay_session_events(self._session.session_id, self._session.entries)[0]
        self.ensure_indexed()
        return self.store.pins(self._session.session_id)

    def memory_items(self) -> tuple[MemoryItem, ...]:
        """Current memory items, from the store or replayed from the session's events."""
        if self.store is None:
            return replay_session_events(self._session.session_id, self._session.entries)[1]
        self.ensure_indexed()
        return self.store.memory_items(self._session.session_id)

    def pinned_entry_ids(self) -> frozenset[str]:
        return frozenset(pin.entry_id for pin in self.pins())

    @property
    def context(self) -> PiContext:
        if self._context is None:
            pinned = self.pinned_entry_ids()
            self._context = self._view.context(self.leaf_id, pinned_entry_ids=pinned)
        return self._context

    @property
    def revision(self) -> str:
        return self._view.revision(self.context.leaf_id)

    def snapshot(self) -> RuntimeHistorySnapshot:
        """The active branch as a ``runtime-history-v1`` snapshot (not validated here)."""
        from ds4_context_engine.pi import PI_RUNTIME_ID  # noqa: PLC0415 - the adapter module, when asked

        context = self.context
        return self._view.snapshot(context, runtime_id=PI_RUNTIME_ID, project_root=self._session.header.cwd)

    def memory_supplements(self) -> tuple[SupplementalItem, ...]:
        """Memory items as planner supplements (priority from the planner's defaults)."""
        return tuple(
            SupplementalItem(id=f"memory:{item.item_id}", kind="memory", text=item.text)
            for item in self.memory_items()
        )

    def _no_model_detail(self) -> str:
        """What to pass when there is no model to plan for: the window alone when the session names one."""
        context = self.context
        if context.provider and context.model_id:
            return (
                f"no context window to plan against; pass --window N to plan for the session's model "
                f"{context.provider}:{context.model_id}, or --model provider:model --window N for another"
            )
        return "no model to plan for: the session names none; pass --model provider:model --window N"

    def plan(self, *, model: ModelDescriptor | None = None, dry_run: bool = False) -> ContextPlan:
        """Plan the active branch for ``model`` (default: the workspace's model).

        The plan state is carried from one call to the next, so consecutive plans of a growing session
        stay cache-stable. Each new plan's manifest is recorded in the store. When the plan leaves history
        out, a ``summary`` supplement (the task digest: first request, later instructions, files, tools)
        stands for it, and, with a store, the cut messages that best match the last user message
        (full-text search) come back as ``retrieved-history`` supplements, up to ``retrieval_hits``.
        """
        descriptor = model or self.model
        if descriptor is None:
            raise CommandError("model-unknown", self._no_model_detail())
        context = self.context
        calibration = self.calibration(descriptor)
        # the ratio learnt from usage once there are enough samples; before that, the provider family's prior
        ratio = calibration.planner_ratio() if calibration is not None else None
        # every append (pins and memory included) or re-read gives a new session object: a key without hashing
        fixed = self._fixed_overhead(descriptor, context, ratio)
        key = (descriptor, dry_run, self._session, self.leaf_id, ratio, self._summaries_version, fixed)
        if self._plan is not None and self._plan_key == key:
            return self._plan
        self._prefix.sync(context.messages)  # kept from plan to plan: what was appended is read
        pinned = list(self._prefix.pinned)
        config = self._planning_config(dry_run)
        state = None if dry_run else self._plan_state
        memory = self.memory_supplements()
        # What stood for the previous step's cut, tried first: while the cut stays, it is still right.
        settled = None if dry_run else self._settled
        if settled is not None and self._settled_version != self._summaries_version:
            settled = settled._replace(key=(-1, None, None))  # a new summary: rebuild once for it
        carried = settled.extra if settled is not None else ()
        # The supplements rebuilt for a compaction's new cut may come out smaller than the ones it was
        # planned with; planned in the same room, they give the same cut instead of a plan that fits
        # at the old cut and changes the front of the plan at a step that compacts nothing.
        reserve = self._supplement_tokens if settled is not None else 0

        def replan(extra: tuple[SupplementalItem, ...]) -> ContextPlan:
            return plan_context(
                context.messages,
                model=descriptor,
                fixed_tokens=fixed,
                config=config,
                state=state,
                pins=pinned,
                supplemental=memory + extra,
                calibration_ratio=ratio,
                # the engine's digest holds core's facts and more: one digest is sent, not two
                task_digest=False if self.task_digest else None,
                supplement_reserve=reserve,
            )

        plan = replan(carried)
        store = self.store if self.retrieval_hits else None
        summaries = self._summary_supplements()

        @functools.cache  # the search depends on the request only: one per call, whatever the passes
        def candidates() -> tuple[tuple[CanonicalMessage, str], ...]:
            return () if store is None else self._retrieval_candidates(store, context.messages)

        def cut_supplements(cut_plan: ContextPlan) -> tuple[SupplementalItem, ...]:
            """Accepted summaries of cut spans, the task digest, then the retrieved history it lacks."""
            cut = cut_messages(context.messages, cut_plan)
            cut_ids = {message.id for message in cut}
            covered = tuple(item for item in summaries if cut_ids.issuperset(item.source_ids))
            digest = None
            if self.task_digest:
                digest = self._digest_reader().digest(context.messages, cut_plan, beside=covered)
            # Retrieved excerpts are old history: they go in front, after the summaries, and stay there
            # until the next compaction, so a new request does not move them and the prefix survives.
            retrieved = tuple(
                msgspec.structs.replace(item, placement="front", priority=RETRIEVED_FRONT_PRIORITY)
                for item in retrieved_supplements(candidates(), cut_plan, limit=self.retrieval_hits)
            )
            return (*covered, *((digest,) if digest is not None else ()), *retrieved)

        settled = settle_cut_supplements(
            context.messages,
            plan,
            cut_supplements,
            replan,
            planned_with=carried,
            planned_for=settled.key if settled is not None else None,
        )
        plan = settled.plan
        if not dry_run:
            self._plan_state = plan.state
            self._settled = settled
            self._settled_version = self._summaries_version
            passed = {"ds4-supplement:" + item.id for item in (*memory, *settled.extra)}
            self._supplement_tokens = sum(item.tokens for item in plan.items if item.message_id in passed)
            if self.store is not None:
                body = msgspec.json.encode(plan.manifest).decode()
                self.store.record_manifest(self._session.session_id, body, leaf_id=context.leaf_id)
        self._plan, self._plan_key = plan, key
        return plan

    def _planning_config(self, dry_run: bool) -> Mapping[str, Any] | Ds4ContextConfig | None:
        """The configuration core plans with: the workspace's, in dry-run mode when asked.

        ``None`` (no configuration given, not a dry run) lets core plan with its plain defaults,
        without validating a model (see the CLI's start-up figures).
        """
        if not dry_run:
            return None if self._config_result is None else self.config
        settings = self.config.model_dump()
        settings["pruning"]["dry_run"] = True
        return settings

    def _retrieval_candidates(
        self, store: DerivedStore, messages: Sequence[CanonicalMessage]
    ) -> tuple[tuple[CanonicalMessage, str], ...]:
        """The search for the last user message, kept while it stays the last one.

        The same request at a later step of its turn finds the same old messages (what was indexed since
        is the recent tail, which the plan holds), so a turn searches once, not at every compaction.
        """
        request = next((m.id for m in reversed(messages) if m.role == "user"), None)
        first = messages[0].id if messages else None  # a host compaction starts another branch view
        key = (self._session.session_id, first, request, self.retrieval_hits)
        if self._candidates is not None and self._candidates[0] == key:
            return self._candidates[1]
        found = retrieval_candidates(store, self._session.session_id, messages, limit=self.retrieval_hits)
        self._candidates = (key, found)
        return found

    def _digest_reader(self) -> TaskDigestReader:
        """The task digest's reader, kept from plan to plan: a compaction feeds it what it newly cut."""
        if self._digests is None:
            write_tools = (
                DEFAULT_WRITE_TOOLS if self._config_result is None else self.config.pruning.write_tools
            )
            self._digests = TaskDigestReader(write_tools=write_tools, keep=_DIGEST_READERS)
        return self._digests

    def stored_summaries(self) -> tuple[StoredSummary, ...]:
        """The cached summary outcomes of this session: from the store, else kept in this workspace."""
        if self.store is None:
            return tuple(self._local_summaries.values())
        self.ensure_indexed()
        try:
            return self.store.summaries(self._session.session_id)
        except DerivedStoreError:
            return ()  # the store is disposable: plan with receipts and the digest alone

    def remember_summary(self, record: StoredSummary) -> None:
        """Cache a summary outcome for its span; the next plan places it when it is accepted."""
        if self.store is None:
            self._local_summaries[record.span_hash] = record
        else:
            self.store.put_summary(record)
        self._summaries_version += 1

    def _summary_supplements(self) -> tuple[SupplementalItem, ...]:
        key = (self._session, self._summaries_version)
        if self._summary_items is None or self._summary_items[0] != key:
            self._summary_items = (key, summary_supplements(self.stored_summaries()))
        return self._summary_items[1]

    async def summarize_cut(
        self,
        complete: Callable[[CompletionRequest], Awaitable[Any]],
        *,
        model: ModelDescriptor | None = None,
        timeout_s: float = SUMMARY_TIMEOUT_S,
        max_chars: int = SUMMARY_DEFAULT_MAX_CHARS,
    ) -> SummaryOutcome | None:
        """Summarise, through ``complete``, what the plan cuts that no accepted summary covers yet.

        See :func:`ds4_context_engine.commands.summarize_cut`: cached by span hash, checked against
        the span, never raising for what the transport does; ``None`` when there is nothing new.
        """
        return await summarize_cut(self, complete, model=model, timeout_s=timeout_s, max_chars=max_chars)

    def _fixed_overhead(self, descriptor: ModelDescriptor, context: PiContext, ratio: float | None) -> int:
        """The explicit ``fixed_tokens``, else the overhead measured from the session's usage, else 0."""
        if self.fixed_tokens is not None:
            self.fixed_tokens_source = "explicit"
            return self.fixed_tokens
        used = ratio if ratio is not None else calibration_prior(descriptor).ratio
        measured = usage_overhead(self._session, context, descriptor, used, prefix=self._prefix)
        self.fixed_tokens_source = "none" if measured is None else "usage"
        return measured or 0

    def close(self) -> None:
        if self.store is not None:
            self.store.close()

    def __enter__(self) -> ContextWorkspace:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
