"""The checkpoint seam: orbax `CheckpointManager` steps plus the files a workdir needs to predict.

Layout of `WORKDIR/checkpoints/`: one orbax step directory per saved step holding `state`
(step, params, optimiser state, RNG) and `data` (the grain iterator position), and beside them
`vocab.json` and `labels.json`.
"""

from __future__ import annotations

import os

import jax
import orbax.checkpoint as ocp

from jcaps.data.vocab import LabelMap, Vocabulary


class Checkpoints:
    def __init__(self, workdir: str, keep: int = 3):
        self.directory = os.path.join(os.path.abspath(workdir), "checkpoints")
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

    def read_state(self, step: int | None = None) -> dict:
        """The saved state of `step` (default latest) as stored, without a target structure."""
        step = self._manager.latest_step() if step is None else step
        return self._manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))["state"]

    def wait(self) -> None:
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.close()

    def save_vocabulary(self, vocab: Vocabulary, labels: LabelMap) -> None:
        vocab.save(os.path.join(self.directory, "vocab.json"))
        labels.save(os.path.join(self.directory, "labels.json"))

    def load_vocabulary(self) -> tuple[Vocabulary, LabelMap] | None:
        vocab_path = os.path.join(self.directory, "vocab.json")
        if not os.path.isfile(vocab_path):
            return None
        return Vocabulary.load(vocab_path), LabelMap.load(os.path.join(self.directory, "labels.json"))


def _savable(state) -> dict:
    return {"step": state.step, "params": state.params, "opt_state": state.opt_state, "rng": state.rng}
