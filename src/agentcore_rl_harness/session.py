"""Deprecated: the run under `--agentcore-rl` is `agentcore_rl_harness.run.core.Run` now (pytest
free); pytest's side of it is `agentcore_rl_harness.pytest_outcomes`. `RunSession` is `Run`
(items are scored with `run_item` / `record_item`; pytest's reports are mapped by
`pytest_outcomes.record_report`). This path works for one more release."""

import warnings

from .pytest_outcomes import RUN_KEY as SESSION_KEY
from .run.core import ExtraSessions
from .run.core import Run as RunSession
from .run.finish import BASELINES_DIR, baseline_path, resolve_baseline, write_report_files
from .run.plan import MODES, TrainItem

warnings.warn("agentcore_rl_harness.session moved to agentcore_rl_harness.run.core (the run) and "
              "agentcore_rl_harness.pytest_outcomes (its pytest side)", DeprecationWarning, stacklevel=2)

__all__ = [
    "BASELINES_DIR", "MODES", "SESSION_KEY", "ExtraSessions", "RunSession", "TrainItem", "baseline_path",
    "resolve_baseline", "write_report_files",
]
