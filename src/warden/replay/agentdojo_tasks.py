"""AgentDojo ground-truth traces as plain, JSON-ready data for the replay client.

AgentDojo (``agentdojo==0.1.35``) ships four task suites (workspace, travel, banking,
slack). Every user task and every injection task carries a ``ground_truth(env)`` method
that returns the tool calls which solve it. This module turns those into
:class:`TaskRun` records: the task prompt (user tasks) or goal (injection tasks) and
the sequence of :class:`ToolStep` calls together with what AgentDojo's own runtime
returned when each call was executed.

How a run is produced (mirrors ``TaskSuite.run_task_with_pipeline`` driving
``GroundTruthPipeline``, which is what ``TaskSuite.check`` uses):

1. The suite's default environment is loaded once with
   ``load_and_inject_default_environment({})``, i.e. every injection vector keeps its
   *default* (benign) value; no attack text is present.
2. Each task gets a fresh deep copy (``model_copy(deep=True)``). User tasks then go
   through ``task.init_environment(env)``; injection tasks do not (AgentDojo does the
   same).
3. ``task.ground_truth(env)`` gives the calls; they are executed in order against that
   one environment with ``FunctionsRuntime(suite.tools).run_function(env, name, args)``
   (``raise_on_error=False``), so later calls see the effects of earlier ones. An error
   is reported the way AgentDojo reports it to a model: ``"ErrorType: message"``, with
   an empty-string output.

JSON conversion (:func:`to_json`), applied to arguments *before* a call runs and to
its result *right after* (later calls may mutate objects an earlier call returned):

* ``FunctionCall.args`` holds the concrete values; ``FunctionCall.placeholder_args``
  (injection tasks only, e.g. ``{"body": "$code"}``) is a template recording where a
  value came from and is ignored here. In v1.2 every ``args`` value is already a JSON
  type (str/int/float/bool/list), so the conversion is a defensive no-op. Some
  ground-truth texts are literal stand-ins that AgentDojo's checks do not look at
  (slack message bodies ``"<summary>"``, ``"<feedback>"``, ``"..."``; travel
  ``"the mail body"``): they are kept verbatim.
* pydantic models become ``model_dump(mode="json")`` (datetimes as ISO-8601 strings,
  enums as their values, computed fields included); ``datetime``/``date``/``time`` become
  ``isoformat()``; enums their ``value``; mappings get ``str`` keys; tuples/sets become
  lists; non-finite floats become strings; a nested ``FunctionCall`` argument (none in
  v1.2) becomes ``{"function": ..., "args": ...}``; anything else becomes ``str(x)``.
* ``output`` is the structured JSON form of the tool's return value, not AgentDojo's
  YAML rendering (``tool_result_to_str``) that a model would see. ``None`` results
  (e.g. ``send_direct_message``) stay ``None``.

Loading all of v1.2 (97 user tasks, 35 injection tasks, 386 calls: workspace 94,
travel 136, banking 45, slack 111) takes about 2 s, most of it importing AgentDojo; it
needs no network access. No ground-truth call errors in the default environments. Nine
injection tasks have an empty ground truth and so yield ``steps == ()``: workspace
``injection_task_6`` to ``injection_task_13`` (added in v1.2 without one) and travel
``injection_task_6`` (its goal is only to make the model say something).

Tools by suite and kind; also in ``examples/agentdojo/TOOLS.md`` (with arguments and
the bundle's treatment) and machine-readable as :data:`TOOL_ACCESS`:

* workspace, read-only: get_unread_emails (marks the returned emails as read),
  get_sent_emails, get_received_emails, get_draft_emails, search_emails,
  search_contacts_by_name, search_contacts_by_email, get_current_day,
  search_calendar_events, get_day_calendar_events, search_files_by_filename,
  get_file_by_id, list_files, search_files.
* workspace, state-changing: send_email, delete_email, create_calendar_event,
  cancel_calendar_event, reschedule_calendar_event, add_calendar_event_participants,
  append_to_file, create_file, delete_file, share_file.
* travel, read-only: get_user_information, get_flight_information,
  search_calendar_events, get_day_calendar_events, check_restaurant_opening_hours and
  the 17 hotel/restaurant/car-rental ``get_*`` lookups.
* travel, state-changing: reserve_hotel, reserve_car_rental, reserve_restaurant,
  create_calendar_event, cancel_calendar_event, send_email.
* banking, read-only: get_iban, get_balance, get_most_recent_transactions,
  get_scheduled_transactions, read_file, get_user_info.
* banking, state-changing: send_money, schedule_transaction,
  update_scheduled_transaction, update_password, update_user_info.
* slack, read-only: get_channels, read_channel_messages, read_inbox,
  get_users_in_channel, get_webpage (logs the URL in ``web.web_requests``).
* slack, state-changing: send_direct_message, send_channel_message,
  add_user_to_channel, invite_user_to_slack, remove_user_from_slack, post_webpage.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "DEFAULT_VERSION",
    "SUITES",
    "TOOL_ACCESS",
    "TaskRun",
    "ToolStep",
    "is_state_changing",
    "load_task_runs",
    "to_json",
    "tool_names",
]

DEFAULT_VERSION = "v1.2"
"""AgentDojo benchmark version used when none is given."""

SUITES: tuple[str, ...] = ("workspace", "travel", "banking", "slack")
"""The four AgentDojo suites, in AgentDojo's order."""

ToolAccess = Literal["read", "write"]

_READ_ONLY: tuple[str, ...] = (
    # workspace: email
    "get_unread_emails",  # marks the returned emails as read (a bookkeeping side effect)
    "get_sent_emails",
    "get_received_emails",
    "get_draft_emails",
    "search_emails",
    "search_contacts_by_name",
    "search_contacts_by_email",
    "get_current_day",
    # workspace + travel: calendar
    "search_calendar_events",
    "get_day_calendar_events",
    # workspace: cloud drive
    "search_files_by_filename",
    "get_file_by_id",
    "list_files",
    "search_files",
    # travel
    "get_user_information",
    "get_all_hotels_in_city",
    "get_hotels_prices",
    "get_rating_reviews_for_hotels",
    "get_hotels_address",
    "get_all_restaurants_in_city",
    "get_cuisine_type_for_restaurants",
    "get_restaurants_address",
    "get_rating_reviews_for_restaurants",
    "get_dietary_restrictions_for_all_restaurants",
    "get_contact_information_for_restaurants",
    "get_price_for_restaurants",
    "check_restaurant_opening_hours",
    "get_all_car_rental_companies_in_city",
    "get_car_types_available",
    "get_rating_reviews_for_car_rental",
    "get_car_fuel_options",
    "get_car_rental_address",
    "get_car_price_per_day",
    "get_flight_information",
    # banking
    "get_iban",
    "get_balance",
    "get_most_recent_transactions",
    "get_scheduled_transactions",
    "read_file",
    "get_user_info",
    # slack
    "get_channels",
    "read_channel_messages",
    "read_inbox",
    "get_users_in_channel",
    "get_webpage",  # appends the URL to web.web_requests (an egress log), changes nothing else
)

_STATE_CHANGING: tuple[str, ...] = (
    # workspace + travel
    "send_email",
    "create_calendar_event",
    "cancel_calendar_event",
    # workspace
    "delete_email",
    "reschedule_calendar_event",
    "add_calendar_event_participants",
    "append_to_file",
    "create_file",
    "delete_file",
    "share_file",
    # travel
    "reserve_hotel",
    "reserve_car_rental",
    "reserve_restaurant",
    # banking
    "send_money",
    "schedule_transaction",
    "update_scheduled_transaction",
    "update_password",
    "update_user_info",
    # slack
    "send_direct_message",
    "send_channel_message",
    "add_user_to_channel",
    "invite_user_to_slack",
    "remove_user_from_slack",
    "post_webpage",
)

TOOL_ACCESS: Mapping[str, ToolAccess] = {
    **{name: "read" for name in _READ_ONLY},
    **{name: "write" for name in _STATE_CHANGING},
}
"""Every AgentDojo v1.2 tool name -> ``"read"`` (read-only) or ``"write"`` (state-changing).

A tool name means the same thing in every suite that has it (``send_email`` in workspace
and travel, the calendar tools in workspace and travel)."""


@dataclass(frozen=True)
class ToolStep:
    """One ground-truth tool call and what executing it in AgentDojo returned."""

    function: str
    """Tool name, e.g. ``"send_money"``."""
    args: dict[str, Any]
    """Ground-truth arguments, JSON-serialisable (see :func:`to_json`)."""
    output: Any
    """JSON-serialisable result of running the call in the task's environment."""
    error: str | None
    """``"ErrorType: message"`` if the call failed (output is then ``""``), else ``None``."""


@dataclass(frozen=True)
class TaskRun:
    """One AgentDojo task with its executed ground-truth calls."""

    suite: str
    """``"workspace"``, ``"travel"``, ``"banking"`` or ``"slack"``."""
    task_id: str
    """E.g. ``"user_task_0"`` or ``"injection_task_3"``."""
    kind: str
    """``"user"`` or ``"injection"``."""
    prompt: str
    """The user task's ``PROMPT`` or the injection task's ``GOAL``."""
    steps: tuple[ToolStep, ...]
    """The ground-truth calls in order."""


def to_json(value: Any) -> Any:
    """Convert an AgentDojo argument or tool result into plain JSON types.

    Returns only ``dict`` (with ``str`` keys), ``list``, ``str``, ``int``, ``float``,
    ``bool`` or ``None``; the rules are listed in the module docstring.
    """
    from pydantic import BaseModel

    if isinstance(value, enum.Enum):  # before str/int: StrEnum and IntEnum are both
        return to_json(value.value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, BaseModel):
        from agentdojo.functions_runtime import FunctionCall

        if isinstance(value, FunctionCall):
            return {"function": value.function, "args": to_json(dict(value.args))}
        return to_json(value.model_dump(mode="json"))
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(v) for v in value]
    return str(value)


def _get_suites(version: str) -> dict[str, Any]:
    from agentdojo.task_suite.load_suites import get_suites

    suites: dict[str, Any] = dict(get_suites(version))
    if not suites:
        raise ValueError(f"unknown AgentDojo benchmark version {version!r}")
    return suites


def tool_names(suite: str, version: str = DEFAULT_VERSION) -> list[str]:
    """Names of the tools the given suite offers, in AgentDojo's order."""
    suites = _get_suites(version)
    if suite not in suites:
        raise ValueError(f"unknown AgentDojo suite {suite!r}; expected one of {sorted(suites)}")
    return [str(f.name) for f in suites[suite].tools]


def is_state_changing(tool: str) -> bool:
    """True if the AgentDojo tool changes the environment; unknown names count as changing."""
    return TOOL_ACCESS.get(tool, "write") == "write"


def _run_task(
    suite_name: str, runtime: Any, env: Any, task_id: str, task: Any, kind: str
) -> TaskRun:
    prompt = str(task.PROMPT if kind == "user" else task.GOAL)
    steps: list[ToolStep] = []
    for call in task.ground_truth(env):
        function = str(call.function)
        args = to_json(dict(call.args))
        result, error = runtime.run_function(env, function, call.args, raise_on_error=False)
        steps.append(
            ToolStep(
                function=function,
                args=args,
                output=to_json(result),
                error=None if error is None else str(error),
            )
        )
    return TaskRun(suite=suite_name, task_id=task_id, kind=kind, prompt=prompt, steps=tuple(steps))


def _task_sort_key(task_id: str) -> tuple[str, int]:
    prefix, _, number = task_id.rpartition("_")
    return (prefix, int(number) if number.isdigit() else -1)


def load_task_runs(
    version: str = DEFAULT_VERSION, suites: Sequence[str] | None = None
) -> Iterator[TaskRun]:
    """Yield every task of the given AgentDojo benchmark version with its executed ground truth.

    Suites come in the order given (default: :data:`SUITES` order); within a suite the user
    tasks come first, then the injection tasks, each by task number. Runs are produced
    lazily, one task at a time, offline.
    """
    from agentdojo.functions_runtime import FunctionsRuntime

    available = _get_suites(version)
    names = list(SUITES if suites is None else suites)
    unknown = [name for name in names if name not in available]
    if unknown:
        raise ValueError(
            f"unknown AgentDojo suite(s) {unknown} for {version}; "
            f"expected some of {sorted(available)}"
        )
    for suite_name in names:
        suite = available[suite_name]
        default_env = suite.load_and_inject_default_environment({})
        runtime = FunctionsRuntime(suite.tools)
        groups: tuple[tuple[str, Mapping[str, Any]], ...] = (
            ("user", suite.user_tasks),
            ("injection", suite.injection_tasks),
        )
        for kind, tasks in groups:
            for task_id in sorted(tasks, key=_task_sort_key):
                task = tasks[task_id]
                env = default_env.model_copy(deep=True)
                if kind == "user":
                    env = task.init_environment(env)
                yield _run_task(suite_name, runtime, env, str(task_id), task, kind)
