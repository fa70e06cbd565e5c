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
    "test_e2e_async.py", "test_e2e_recipe.py", "tasks_migration/test_migration_java.py",
    "tasks_migration/test_migration_cli_agents.py",
)


# SLOW_TESTS (slow_list.py): tests marked `slow` here rather than at their definition, each 3 s or
# more when measured; `pytest -m "not slow"` (the fast tier, docs/development.md) leaves them out.
from slow_list import SLOW_TESTS  # noqa: E402


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


JAVA_ENVIRONMENT = os.path.join(os.path.dirname(__file__), "..", "tasks", "migration", "environments", "java.yaml")


@pytest.fixture(scope="session")
def java_environment():
    """The migration pack's Java environment (a Debian-built rootfs), built once by
    `scripts/setup test`; a test that needs it fails, with the command, where it is not built."""
    from agentcore_rl_harness.environments import find_built, load_spec

    spec = load_spec(JAVA_ENVIRONMENT)
    built = find_built(spec)
    if built is None:
        pytest.fail(f"the environment {spec.name} is not built: run `bash scripts/setup test` or "
                    f"`agentcore-rl env build {os.path.relpath(spec.source)}` (once; cached)")
    return built
