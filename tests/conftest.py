import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Every pytest this suite starts (pytester's, the end-to-end runs', sweep jobs', xdist workers of
# an inner run) leaves out the installed third-party plugins no inner project uses: they cost
# ~3.5 CPU-seconds per process (langsmith's 1.7, hypothesis's 0.8, benchmark's and hydra's the
# rest: 5.5 -> 2.0 s for an empty test file), and the suite starts hundreds of them. The suite's
# own process (already configured when this runs) keeps them; pytester clears PYTEST_ADDOPTS, so
# the `pytester` fixture below sets it again.
INNER_PYTEST_ADDOPTS = "-p no:langsmith_plugin -p no:hypothesispytest -p no:benchmark -p no:hydra_pytest"
os.environ["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} {INNER_PYTEST_ADDOPTS}".strip()

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytest's `pytester`, its runs without the unused plugins (INNER_PYTEST_ADDOPTS)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", INNER_PYTEST_ADDOPTS)
    return pytester


def pytest_configure(config):
    # Every pytester run in its own subprocess: an in-process run drops the modules it imported
    # first (numpy, scipy), whose C extensions cannot load twice, so later tests failed or passed
    # depending on which files ran before them.
    config.option.runpytest = "subprocess"
    # torch._dynamo (which transformers imports lazily on the first model load) imports
    # torch._inductor.test_operators; its name matches test_*.py, so pytest's assertion rewriter
    # takes it, and a first import that races another thread's (a trainer update, a server)
    # registered its torch library twice ("Only a single TORCH_LIBRARY ... _inductor_test").
    # Imported here, once, before any test starts a thread.
    try:
        import torch._dynamo  # noqa: F401
    except ImportError:
        pass


@pytest.fixture(scope="session")
def tiny_model_dir():
    """The `tiny` model folder (built locally from a config, same tokenizer/template as SmolLM2)."""
    from agentcore_rl_harness.models import prepare_model

    return prepare_model("tiny")


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    """The `tiny` model's tokenizer (no weights)."""
    from agentcore_rl_harness.models import load_tokenizer

    return load_tokenizer(tiny_model_dir)


@pytest.fixture
def scripted_harness(tiny_tokenizer):
    """Builds run-core harnesses on a given runtime over `ScriptedSampler`, whose replies alternate
    "4" / "5" unless given (so groups are rarely constant); closes them after the test."""
    from agentcore_rl_harness.config import compose_config
    from agentcore_rl_harness.run.compose import Harness
    from agentcore_rl_harness.samplers.scripted import ScriptedSampler

    made = []

    def build(overrides, *, runtime, replies=None, trainer=None):
        counter = iter(range(10**6))
        sampler = ScriptedSampler(replies or (lambda prompt, params: "4" if next(counter) % 2 == 0 else "5"),
                                  encode=tiny_tokenizer.encode)
        harness = Harness(compose_config(list(overrides)).typed, sampler=sampler, tokenizer=tiny_tokenizer,
                          model_id="tiny-test", runtime=runtime, trainer=trainer)
        made.append(harness)
        return harness

    yield build
    for harness in made:
        harness.close()


# Tests of optional integrations skip where their package is missing (a developer's machine);
# CI installs them (scripts/setup test), so there a missing one fails the run instead of skipping.
CI_REQUIRED_MODULES = ("verl.experimental.agent_loop.agent_loop", "sagemaker.train.training_session", "tinker")


def pytest_sessionstart(session):
    if not os.environ.get("CI"):
        return
    import importlib

    missing = []
    for name in CI_REQUIRED_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            missing.append(f"{name} ({exc})")
    if missing:
        raise pytest.UsageError(f"CI needs these installed by scripts/setup test: {', '.join(missing)}")


# The slowest files (seconds summed over their tests, `pytest -n 2 --durations=0`, 2026-12-07, then
# re-ranked by what the speed4 branch took out of each: fewer sweep jobs, runs and rollouts, and
# ~3.5 CPU-s less per inner pytest): under `--dist loadfile` files go to the workers in collection
# order, so the slowest go first and the short ones fill in at the end instead of one worker
# finishing a long e2e file alone.
SLOWEST_FIRST = (
    "test_sweep.py", "test_e2e_run.py", "test_sharding.py", "samplers/test_vllm_real.py", "test_e2e_eval.py",
    "tasks_office/test_office_lift.py", "test_progress.py", "test_scaffold.py", "test_sanity_agents.py",
    "trainers/test_sagemaker_trainer.py", "trainers/test_tinker_trainer.py", "docs/test_tutorial.py",
    "runtimes/test_local_runtime.py", "test_plugin.py", "test_e2e_warmup.py", "test_e2e_silent.py",
    "test_pytest_outcomes.py", "test_resume_kill.py", "test_e2e_robust.py", "test_e2e_art.py",
    "test_e2e_async.py",
)


# Tests marked `slow` here rather than at their definition (a file's own `slow` marks stay there):
# each took 3 s or more in CI or in a `-m "not slow" -n 2 --durations=0` run (2026-12-07), most
# of them because they start sandboxed agent sessions, a trainer, a browser or an mkdocs build.
# `pytest -m "not slow"` (the fast tier, docs/development.md) leaves them out; CI runs them.
# A parametrized test is named once, by its function.
SLOW_TESTS = {
    "docs/test_site.py": (
        "test_a_broken_link_fails_the_build",
        "test_the_site_builds_strictly",
    ),
    "gateway/test_lifecycle.py": (
        "test_context_budget_lowers_max_tokens_then_ends_turns_without_sampling",
        "test_turn_cap_is_429_on_every_wire",
    ),
    "judges/test_judge_clients.py": (
        "test_a_bad_judge_config_is_refused_naming_the_key",
    ),
    "reports/test_html_chromium.py": (
        "test_a_hostile_page_would_be_caught_by_this_check",
        "test_report_renders_runs_its_script_and_injects_nothing",
    ),
    "reports/test_render.py": (
        "test_write_reports_writes_all_four_and_the_step_summary",
    ),
    "run/test_judging.py": (
        "test_a_group_is_judged_in_one_call_with_scores_relative_to_each_other",
        "test_a_judged_reward_scores_rollouts_counts_judge_errors_and_rescore_reuses_its_answers",
        "test_a_policy_judge_samples_the_policy_directly_and_never_enters_a_trace",
        "test_an_openai_judge_without_its_key_is_a_judge_error_naming_the_variable",
    ),
    "run/test_task_limits.py": (
        "test_an_episode_past_its_turn_limit_is_limit_exceeded_naming_the_limit",
    ),
    "run/test_tracking.py": (
        "test_a_failing_tracker_warns_once_and_the_run_loses_nothing",
        "test_a_resumed_run_tells_its_tracker_the_steps_it_kept_then_the_new_ones",
        "test_a_tracker_is_told_the_config_every_step_and_the_report",
        "test_an_eval_run_reports_its_phase_with_failures_by_status",
        "test_mlflow_against_a_dead_server_warns_and_the_run_goes_on",
    ),
    "run/test_warmup.py": (
        "test_a_conversation_renders_as_the_template_with_the_mask_on_assistant_tokens",
        "test_the_warm_up_trains_on_train_rows_only_and_lowers_their_loss",
    ),
    "runtimes/test_acr_kept_sessions.py": (
        "test_a_task_and_its_reward_inspect_the_live_acr_session_which_is_stopped_after_scoring",
        "test_the_harness_scoring_itself_gives_the_body_its_sandbox",
    ),
    "runtimes/test_acr_sandbox.py": (
        "test_a_live_sessions_sandbox_ends_with_it",
        "test_background_output_is_capped",
    ),
    "runtimes/test_agentcore_faults.py": (
        "test_aclose_stops_sessions_still_running",
        "test_cancelling_a_batch_stops_every_live_session",
        "test_inline_timeout_stops_the_session_and_frees_the_invoke",
        "test_result_never_written_times_out_and_the_session_is_stopped",
        "test_throttling_then_success_runs_the_agent_once",
        "test_unavailable_before_the_agent_ran_is_resent",
    ),
    "runtimes/test_agentcore_runtime.py": (
        "test_a_short_session_id_is_refused_before_any_call",
        "test_agent_that_raises_is_an_agent_error",
        "test_art_style_agent_runs_unchanged",
        "test_inline_json_result_over_the_wire_then_the_session_is_stopped",
        "test_invokes_and_stops_share_one_rate_limit_per_arn",
        "test_is_an_agent_runtime",
        "test_live_sessions_are_capped",
        "test_region_comes_from_the_arn_and_invokes_are_never_blindly_retried",
        "test_s3_error_result_is_an_agent_error_with_the_traceback",
        "test_s3_mode_end_to_end",
        "test_s3_mode_input_id_defaults_to_the_task",
        "test_s3_requests_match_the_service_models",
        "test_streamed_result_is_the_last_data_event",
        "test_tasks_map_to_their_own_arns",
    ),
    "runtimes/test_art_agents.py": (
        "test_acr_rl_app_outside_s3_mode_is_a_clear_agent_error",
        "test_acr_runtime_app_in_every_result_mode",
        "test_acr_s3_rl_app_result_comes_from_s3",
        "test_acr_start_get_failure_is_an_agent_error",
        "test_local_background_invocation_that_fails_is_an_agent_error",
        "test_local_result_modes_for_every_art_app",
        "test_local_rl_app_in_the_inline_mode_is_an_agent_error_naming_the_result_mode",
        "test_local_runtime_app_answers_inline_or_through_get",
    ),
    "runtimes/test_isolation.py": (
        "test_a_hostile_session_cannot_reach_a_live_victim_or_the_harness",
        "test_a_timed_out_session_leaves_no_process_behind",
        "test_limits_bound_a_session_process",
        "test_session_commands_get_their_own_session_and_limits_either_way",
        "test_the_session_sees_its_own_dir_writable_and_private_temp",
        "test_uid_fallback_walls_off_files_signals_and_ptrace",
    ),
    "runtimes/test_limits.py": (
        "test_the_runtime_group_carries_the_limiter_keys",
    ),
    "runtimes/test_local_runtime.py": (
        "test_agent_process_exiting_mid_request_reports_exit_code_and_stderr",
        "test_agent_raising_mid_stream_is_an_agent_error",
        "test_an_agent_that_returns_none_is_an_agent_error_naming_the_fix",
        "test_base_dir_holds_session_directories",
        "test_chatty_agent_does_not_block_on_stdout",
        "test_echo_agent_answers_in_an_isolated_process",
        "test_hanging_agent_times_out_and_its_process_group_is_killed",
        "test_non_dict_result_is_wrapped",
        "test_raising_agent_is_an_agent_error_with_its_message",
        "test_slow_startup_is_a_timeout",
        "test_streaming_agent_result_is_the_last_event",
        "test_unloadable_agent_is_an_agent_error",
    ),
    "samplers/test_hosted.py": (
        "test_bedrock_failures_are_clear_errors_and_the_agent_gets_a_502",
        "test_openai_endpoint_failures_stop_the_run_before_any_rollout",
    ),
    "test_import_graph.py": (
        "test_no_arrow_runs_up_a_layer",
        "test_no_import_circle",
        "test_nothing_imports_the_package_facade",
    ),
    "test_public_api.py": (
        "test_import_is_light",
    ),
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(session, config, items):
    root = Path(__file__).resolve().parent

    def name_of(item) -> str | None:
        try:
            return Path(str(item.fspath)).resolve().relative_to(root).as_posix()
        except ValueError:
            return None

    def rank(item) -> int:
        name = name_of(item)
        return SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST else len(SLOWEST_FIRST)

    for item in items:
        if getattr(item, "originalname", None) in SLOW_TESTS.get(name_of(item), ()):
            item.add_marker(pytest.mark.slow)
    items.sort(key=rank)  # stable: the order inside a file and among the rest is kept
