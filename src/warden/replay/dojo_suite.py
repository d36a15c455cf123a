"""AgentDojo's side of the efficacy measurement: suites, attacks, environments and checks.

Everything here is AgentDojo 0.1.35's own machinery, suites v1.2:

* suites from ``get_suites("v1.2")``; tools run in its ``FunctionsRuntime``
  (``raise_on_error=False``: an error is a result the agent sees, as in a model run);
* the attack is AgentDojo's ``important_instructions`` template
  (``ImportantInstructionsAttack._JB_STRING``) through its ``FixedJailbreakAttack``, user
  name "Emma Johnson", generic model name: ``attack.attack(user_task, injection_task)``
  gives the injection vectors the user task's ground truth reads (AgentDojo finds them
  with canaries) and the text placed there;
* the environment of a pair is ``load_and_inject_default_environment(injections)``, then
  the user task's ``init_environment``; the snapshot before any call is the
  ``pre_environment`` of the checks;
* the checks are ``TaskSuite._check_task_result`` (``utility()`` /
  ``utility_from_traces()`` of a user task, ``security()`` / ``security_from_traces()``
  of an injection task). They mutate what they are given (reading mail marks it read),
  so :meth:`DojoSuite.check` hands each check its own deep copies.

:class:`ObedientGroundTruth` is the no-defence baseline as an AgentDojo pipeline: it
runs the user task's ground truth, and once a tool output carries an injection task's
goal it runs that injection task's calls — a model that obeys every injection. Fed to
AgentDojo's ``benchmark_suite_with_injections`` it gives AgentDojo's own figures for an
undefended agent, which the harness must reproduce with a bundle that allows everything
(tests/replay/test_dojo_efficacy.py).

Workspace ``injection_task_6`` … ``_13`` have an empty ``ground_truth()`` in v1.2; their
calls come from :mod:`warden.replay.dojo_authored`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from warden.provenance.graph import leaves
from warden.replay.agentdojo_tasks import DEFAULT_VERSION, SUITES, _task_sort_key, to_json
from warden.replay.dojo_authored import authored_calls

__all__ = ["DojoSuite", "ObedientGroundTruth", "agentdojo_baseline", "output_text"]

#: The user name AgentDojo's important_instructions attack signs with.
ATTACK_USER = "Emma Johnson"


def output_text(value: Any) -> str:
    """Every string leaf of a tool result (JSON form), one per line: where the harness
    and the baseline look for the attack text."""
    return "\n".join(leaves(to_json(value)))


@dataclass(frozen=True)
class Executed:
    """One call run in AgentDojo's runtime: its result (raw and JSON) or its error."""

    call: Any
    result: Any
    error: str | None

    @property
    def json(self) -> Any:
        return to_json(self.result)


class DojoSuite:
    """One AgentDojo suite at ``version`` with the attack and the checks.

    Raises ValueError for an unknown suite or version."""

    def __init__(self, name: str, version: str = DEFAULT_VERSION) -> None:
        from agentdojo.attacks.base_attacks import DEFAULT_MODEL_NAME, FixedJailbreakAttack
        from agentdojo.attacks.important_instructions_attacks import ImportantInstructionsAttack
        from agentdojo.functions_runtime import FunctionsRuntime
        from agentdojo.task_suite.load_suites import get_suites

        suites = dict(get_suites(version))
        if name not in suites:
            raise ValueError(
                f"unknown AgentDojo suite {name!r} for {version}; expected some of {sorted(suites)}"
            )
        self.name = name
        self.version = version
        self.suite: Any = suites[name]
        self.runtime: Any = FunctionsRuntime(self.suite.tools)
        # The target pipeline is only used by attacks that name the model; this one does not.
        attack = FixedJailbreakAttack(
            ImportantInstructionsAttack._JB_STRING,
            self.suite,
            None,
        )
        attack.name = "important_instructions_no_model_name"  # what AgentDojo calls this variant
        attack.user_name = ATTACK_USER
        attack.model_name = DEFAULT_MODEL_NAME
        self.attack: Any = attack

    # -- tasks ---------------------------------------------------------------------------

    @cached_property
    def user_task_ids(self) -> list[str]:
        """The suite's user task ids by number."""
        return sorted(self.suite.user_tasks, key=_task_sort_key)

    @cached_property
    def injection_task_ids(self) -> list[str]:
        """The suite's injection task ids by number."""
        return sorted(self.suite.injection_tasks, key=_task_sort_key)

    def user_task(self, task_id: str) -> Any:
        return self.suite.user_tasks[task_id]

    def injection_task(self, task_id: str) -> Any:
        return self.suite.injection_tasks[task_id]

    def injection_calls(self, task_id: str, env: Any) -> list[Any]:
        """The injection task's calls for ``env`` as it stands when the attack starts: the
        authored set (workspace 6–13) or the task's own ``ground_truth(env)``."""
        authored = authored_calls(self.name, task_id, env)
        if authored is not None:
            return authored
        return list(self.injection_task(task_id).ground_truth(env))

    @cached_property
    def text_only_injections(self) -> frozenset[str]:
        """Injection tasks with no call at all (travel ``injection_task_6``: its goal is
        only that the model *says* something). No tool call exists for a gate to stop, and
        a ground-truth replay's final answer is the user task's, so they are left out of
        the attack success rate and counted apart."""
        env = self.clean_environment()
        return frozenset(i for i in self.injection_task_ids if not self.injection_calls(i, env))

    # -- environments ---------------------------------------------------------------------

    @cached_property
    def _clean(self) -> Any:
        return self.suite.load_and_inject_default_environment({})

    def clean_environment(self) -> Any:
        """A fresh copy of the suite's environment with every vector at its default."""
        return self._clean.model_copy(deep=True)

    def injections(self, user_task: str, injection_task: str) -> dict[str, str]:
        """Vector id → attack text for the pair (AgentDojo's attack, see module doc)."""
        out: dict[str, str] = self.attack.attack(
            self.user_task(user_task), self.injection_task(injection_task)
        )
        return out

    @cached_property
    def _vector_defaults(self) -> dict[str, str]:
        defaults: dict[str, str] = self.suite.get_injection_vector_defaults()
        return defaults

    def attacked_environment(self, injections: dict[str, str]) -> Any:
        """The suite's environment with ``injections`` at their vectors (not yet
        initialised for a task): AgentDojo's ``load_and_inject_default_environment`` step
        for step (the same file, defaults, check and text formatting), parsed with
        libyaml's loader when present — ten times faster than the pure-Python one that
        dominated the run. The baseline loads through AgentDojo itself, so a difference
        would show in the pair-by-pair comparison."""
        import yaml
        from agentdojo.task_suite.task_suite import read_suite_file, validate_injections

        text = read_suite_file(self.suite.name, "environment.yaml", self.suite.data_path)
        validate_injections(injections, self._vector_defaults)
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        doc = yaml.load(text.format(**(self._vector_defaults | injections)), Loader=loader)  # noqa: S506
        return self.suite.environment_type.model_validate(doc)

    # -- running and checking --------------------------------------------------------------

    def run(self, env: Any, call: Any) -> Executed:
        """Execute one call in ``env`` with AgentDojo's runtime (errors are results)."""
        result, error = self.runtime.run_function(
            env, str(call.function), call.args, raise_on_error=False
        )
        return Executed(call, result, None if error is None else str(error))

    def check(self, task: Any, output: str, pre: Any, post: Any, trace: Sequence[Any] = ()) -> bool:
        """AgentDojo's own check of ``task`` (utility of a user task, attack success of an
        injection task) on deep copies of ``pre`` and ``post``; ``output`` is the agent's
        final answer, ``trace`` the calls that ran (``FunctionCall`` objects)."""
        from agentdojo.types import text_content_block_from_string

        ok: bool = self.suite._check_task_result(
            task,
            [text_content_block_from_string(output)],
            pre.model_copy(deep=True),
            post.model_copy(deep=True),
            list(trace),
        )
        return bool(ok)


def _squash(text: str) -> str:
    return " ".join(text.split())


class ObedientGroundTruth:
    """An AgentDojo pipeline element (``BasePipelineElement``'s ``query``) for the
    no-defence baseline: the task's ground truth, then the calls of the injection task
    whose goal appeared in a tool output (the longest goal found, since some goals extend
    others; compared with whitespace runs folded), computed on the environment as it then
    stands. Final answer: the task's ``GROUND_TRUTH_OUTPUT``."""

    name = "warden-obedient-ground-truth"

    def __init__(self, dojo: DojoSuite) -> None:
        self.dojo = dojo
        self._by_prompt: dict[str, Any] = {
            str(t.PROMPT): t for t in dojo.suite.user_tasks.values()
        } | {str(t.GOAL): t for t in dojo.suite.injection_tasks.values()}

    def query(
        self,
        query: str,
        runtime: Any,
        env: Any = None,
        messages: Sequence[Any] = (),
        extra_args: dict[str, Any] | None = None,
    ) -> tuple[str, Any, Any, list[Any], dict[str, Any]]:
        from agentdojo.base_tasks import BaseInjectionTask
        from agentdojo.types import (
            ChatAssistantMessage,
            ChatToolResultMessage,
            text_content_block_from_string,
        )

        task = self._by_prompt[query]
        out: list[Any] = []
        seen: list[str] = []

        def run(calls: list[Any]) -> None:
            for call in calls:
                out.append(
                    ChatAssistantMessage(
                        role="assistant",
                        tool_calls=[call],
                        content=[text_content_block_from_string("")],
                    )
                )
                result, error = runtime.run_function(
                    env, call.function, call.args, raise_on_error=False
                )
                seen.append(output_text(result))
                out.append(
                    ChatToolResultMessage(
                        role="tool",
                        content=[text_content_block_from_string(str(error or ""))],
                        tool_call=call,
                        tool_call_id=None,
                        error=error,
                    )
                )

        if isinstance(task, BaseInjectionTask):
            run(self.dojo.injection_calls(str(task.ID), env))
        else:
            run(list(task.ground_truth(env)))
            # Whitespace-insensitive: the attack text goes into the environment's YAML,
            # whose loading folds the goals' blank lines.
            text = _squash("\n".join(seen))
            goals = [
                (len(_squash(str(t.GOAL))), str(t.ID))
                for t in self.dojo.suite.injection_tasks.values()
                if _squash(str(t.GOAL)) in text
            ]
            if goals:
                run(self.dojo.injection_calls(max(goals)[1], env))
        out.append(
            ChatAssistantMessage(
                role="assistant",
                content=[text_content_block_from_string(str(task.GROUND_TRUTH_OUTPUT))],
                tool_calls=None,
            )
        )
        return query, runtime, env, [*messages, *out], dict(extra_args or {})


@dataclass(frozen=True)
class BaselinePair:
    """AgentDojo's verdict on one attacked pair with no defence."""

    suite: str
    user_task: str
    injection_task: str
    utility: bool
    attack_success: bool


def agentdojo_baseline(
    suites: Sequence[str] | None = None,
    *,
    user_tasks: int | None = None,
    injection_tasks: Sequence[str] | None = None,
    version: str = DEFAULT_VERSION,
) -> list[BaselinePair]:
    """AgentDojo's own no-defence figures: per attacked pair, AgentDojo's
    ``TaskSuite.run_task_with_pipeline`` with :class:`ObedientGroundTruth` and the
    pair's injections from the attack above — what its ``benchmark_suite_with_injections``
    does per pair, without writing a trace file per pair. ``user_tasks``: the first N
    user tasks; ``injection_tasks``: only these. Text-only injection tasks are left out,
    as in the harness."""
    import warnings

    pairs: list[BaselinePair] = []
    for name in suites or SUITES:
        dojo = DojoSuite(name, version)
        pipeline = ObedientGroundTruth(dojo)
        chosen = [
            i
            for i in dojo.injection_task_ids
            if i not in dojo.text_only_injections
            and (injection_tasks is None or i in injection_tasks)
        ]
        for ut in dojo.user_task_ids[:user_tasks]:
            for it in chosen:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    utility, security = dojo.suite.run_task_with_pipeline(
                        pipeline,
                        dojo.user_task(ut),
                        dojo.injection_task(it),
                        dojo.injections(ut, it),
                    )
                pairs.append(BaselinePair(name, ut, it, bool(utility), bool(security)))
    return pairs
