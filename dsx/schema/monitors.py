"""Monitors: `tensorboard`, `wandb`, `csv_monitor` and `comet`, each a top-level key of its own.

DeepSpeed parses each with a pydantic model (deepspeed/monitor/config.py, extra="forbid"): a misspelled key is
REJECTED, but "true" strings pass and a value of "auto" silently becomes the default. Rank 0 writes the events
(loss, learning rate, loss scale, samples) every step.
"""

from __future__ import annotations

from typing import Literal, Optional

from typing_extensions import Annotated

from dsx.schema.base import Bool, Field, Int, Section

__all__ = ["TensorBoardConfig", "WandbConfig", "CSVMonitorConfig", "CometConfig"]


class TensorBoardConfig(Section):
    """TensorBoard event files (needs the `tensorboard` package)."""

    enabled: Bool = False
    """Write TensorBoard events."""
    output_path: str = ""
    """Directory for the logs; empty means under the launching directory."""
    job_name: str = "DeepSpeedJobName"
    """Name of the run; becomes a subdirectory of output_path."""


class WandbConfig(Section):
    """Weights & Biases logging (needs the `wandb` package)."""

    enabled: Bool = False
    """Log to Weights & Biases."""
    group: Optional[str] = None
    """W&B group name, to group related runs."""
    team: Optional[str] = None
    """W&B team (entity) name."""
    project: str = "deepspeed"
    """W&B project name."""


class CSVMonitorConfig(Section):
    """Local CSV files, one per metric (DeepSpeed's CSVConfig)."""

    enabled: Bool = False
    """Write CSV files."""
    output_path: str = ""
    """Directory for the files; empty means under the launching directory."""
    job_name: str = "DeepSpeedJobName"
    """Name of the run; becomes a subdirectory of output_path."""


class CometConfig(Section):
    """Comet experiment logging (needs the `comet_ml` package); unset values fall back to Comet's own config."""

    enabled: Bool = False
    """Log to Comet."""
    samples_log_interval: Int = 100
    """Send metrics after every this many training samples."""
    project: Optional[str] = None
    """Comet project name (else .comet.config or COMET_PROJECT_NAME)."""
    workspace: Optional[str] = None
    """Comet workspace (else .comet.config or COMET_WORKSPACE)."""
    api_key: Optional[str] = None
    """Comet API key (else .comet.config or COMET_API_KEY); better kept out of the config file."""
    experiment_name: Optional[str] = None
    """Display name of the experiment (else COMET_EXPERIMENT_NAME)."""
    experiment_key: Optional[Annotated[str, Field(pattern=r"^[A-Za-z0-9]{32,50}$")]] = None
    """Key of the experiment to create or continue: 32 to 50 alphanumeric characters, as Comet requires."""
    online: Optional[Bool] = None
    """Log to the Comet server (true, Comet's default) or to a local offline archive (false)."""
    mode: Optional[Literal["get", "create", "get_or_create"]] = None
    """How Comet starts: "get" an existing experiment by key, always "create", or "get_or_create" (Comet's default)."""
