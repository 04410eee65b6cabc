"""The checkpoint seam: orbax `CheckpointManager` steps plus the files a workdir needs to predict.

Layout of `WORKDIR/checkpoints/`: one orbax step directory per saved step holding `state`
(step, params, optimiser state, RNG) and `data` (the grain iterator position), and beside them
what encodes new inputs (`labels.json`, and `vocab.json` or the series standardisation; see
`jcaps.data.datasets`). `WORKDIR/best/` holds the parameters of the best validation
evaluation so far (`params`) with its `record` ({"step", "metric", "value"}).
"""

from __future__ import annotations

import os

import jax
import orbax.checkpoint as ocp


def checkpoint_directory(workdir: str) -> str:
    """WORKDIR/checkpoints, where the manager keeps its steps (created when first opened)."""
    return os.path.join(os.path.abspath(workdir), "checkpoints")


class Checkpoints:
    def __init__(self, workdir: str, keep: int = 3):
        self.directory = checkpoint_directory(workdir)
        self.best_directory = os.path.join(os.path.abspath(workdir), "best")
        self._best = None
        self._manager = ocp.CheckpointManager(
            self.directory,
            item_names=("state", "data"),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True),
        )

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, state, data_state: dict | None) -> None:
        items = {"state": ocp.args.StandardSave(_savable(state))}
        if data_state is not None:
            items["data"] = ocp.args.JsonSave(data_state)
        self._manager.save(step, args=ocp.args.Composite(**items), force=True)

    def restore(self, state, step: int | None = None, with_data: bool = True):
        """Restores into the structure (and shardings) of `state`; returns (state, data_state)."""
        step = self._manager.latest_step() if step is None else step
        target = jax.tree.map(ocp.utils.to_shape_dtype_struct, _savable(state))
        items = {"state": ocp.args.StandardRestore(target)}
        if with_data:
            items["data"] = ocp.args.JsonRestore()
        restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        saved = restored["state"]
        state = state.replace(step=saved["step"], params=saved["params"], opt_state=saved["opt_state"], rng=saved["rng"])
        return state, (restored["data"] if with_data else None)

    def restore_params(self, params, step: int | None = None):
        """The parameters of `step` (default latest) alone, restored into the structure and
        shardings of `params`: loading a model for inference reads no optimiser state, so it
        needs none built."""
        step = self._manager.latest_step() if step is None else step
        target = {"params": jax.tree.map(ocp.utils.to_shape_dtype_struct, params)}
        restore_args = ocp.checkpoint_utils.construct_restore_args(target)
        args = ocp.args.PyTreeRestore(item=target, restore_args=restore_args, partial_restore=True)
        return self._manager.restore(step, args=ocp.args.Composite(state=args))["state"]["params"]

    def read_state(self, step: int | None = None) -> dict:
        """The saved state of `step` (default latest) as stored, without a target structure."""
        step = self._manager.latest_step() if step is None else step
        return self._manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))["state"]

    def wait(self) -> None:
        self._manager.wait_until_finished()
        if self._best is not None:
            self._best.wait_until_finished()

    def close(self) -> None:
        self._manager.close()
        if self._best is not None:
            self._best.close()

    # The best-on-validation parameters (model selection never looks at test).

    @property
    def _best_manager(self) -> ocp.CheckpointManager:
        if self._best is None:
            self._best = ocp.CheckpointManager(
                self.best_directory,
                item_names=("params", "record"),
                options=ocp.CheckpointManagerOptions(
                    max_to_keep=1,
                    create=True,
                    # Both managers may save the same step (the last one): in a multi-process
                    # run their barriers must not share names.
                    multiprocessing_options=ocp.options.MultiprocessingOptions(barrier_sync_key_prefix="best"),
                ),
            )
        return self._best

    def best_record(self) -> dict | None:
        """{"step", "metric", "value"} of the best validation evaluation saved, or None."""
        if not os.path.isdir(self.best_directory):
            return None
        step = self._best_manager.latest_step()
        if step is None:
            return None
        return self._best_manager.restore(step, args=ocp.args.Composite(record=ocp.args.JsonRestore()))["record"]

    def save_best(self, step: int, params, metric: str, value: float) -> None:
        record = {"step": int(step), "metric": metric, "value": float(value)}
        self._best_manager.save(
            step, args=ocp.args.Composite(params=ocp.args.StandardSave(params), record=ocp.args.JsonSave(record)), force=True
        )

    def restore_best_params(self, params):
        """The best parameters, restored into the structure and shardings of `params`."""
        step = self._best_manager.latest_step()
        target = jax.tree.map(ocp.utils.to_shape_dtype_struct, params)
        return self._best_manager.restore(step, args=ocp.args.Composite(params=ocp.args.StandardRestore(target)))["params"]


def keep_if_best(checkpoints: Checkpoints, best: dict | None, step: int, params, metrics: dict, train_config):
    """Model selection after a validation evaluation: saves `params` as the best when
    `metrics[train.select_metric]` beats `best` (ties keep the earlier step); returns the best
    record `{"step", "metric", "value"}`, or None without `train.select_best`."""
    if not train_config.select_best:
        return None
    value = metrics[train_config.select_metric]
    if best is None or value > best["value"]:
        checkpoints.save_best(step, params, train_config.select_metric, value)
        return {"step": step, "metric": train_config.select_metric, "value": value}
    return best


def _savable(state) -> dict:
    return {"step": state.step, "params": state.params, "opt_state": state.opt_state, "rng": state.rng}
