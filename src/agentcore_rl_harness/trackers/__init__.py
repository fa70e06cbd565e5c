"""Experiment trackers (`logger=wandb|mlflow|tensorboard`): where a run's metrics also appear.

`base.Tracker` is the seam; each tracker is one module `<name>_tracker.py` (with its config node
`conf/logger/<name>.yaml`), imported only when selected. `run.tracking` feeds them.
"""
