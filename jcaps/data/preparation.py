"""From a data config to prepared splits: local files and box data through the `builders`,
catalogue datasets through TFDS (downloaded once), each prepared once into `data.cache_dir`.

Preparation is serialised across processes by a file lock in the cache (an ablation sweep
starting several runs on the same files prepares them once), and a preparation that fails
leaves no empty or half-written folders behind. A catalogue dataset that is not prepared and
cannot be downloaded fails within seconds, with a hint to use local files instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable

import tensorflow_datasets as tfds

from jcaps.choices import check_choice
from jcaps.data import builders, choices, synthetic
from jcaps.data.splits import InMemorySplit, PreparedSplits, Split
from jcaps.errors import ConfigError, UserError


def default_cache_dir(data_config) -> str:
    return os.path.expanduser(data_config.cache_dir or os.path.join("~", "tensorflow_datasets"))


def resolve_source(data_config) -> str:
    """'tfds', 'local' or 'synthetic', from `data.source` and whether `data.dir` is set."""
    if data_config.source == "auto":
        return "local" if data_config.dir else "tfds"
    check_choice("data.source", data_config.source, choices.Source, ConfigError)
    return data_config.source


def prepare_text_splits(data_config, seed: int) -> PreparedSplits:
    """The splits of a text dataset from its source (`resolve_source`): the TFDS catalogue, local
    files, or generated files (`seed` draws them), prepared once."""
    source = resolve_source(data_config)
    if source == "tfds":
        return _catalogue_splits(data_config)
    directory, data_format = data_config.dir, data_config.format
    if source == "synthetic":
        multi_label = data_config.label_key == "labels"
        write = synthetic.write_multilabel_jsonl if multi_label else synthetic.write_zhang_csv
        directory = write(
            os.path.join(default_cache_dir(data_config), "jcaps_synthetic"),
            train_size=data_config.synthetic_train_size,
            test_size=data_config.synthetic_test_size,
            seed=seed,
            decoys=data_config.synthetic_decoys,
        )
        data_format = "jsonl" if multi_label else "zhang_csv"
    builder = prepare_local_files(
        data_format,
        directory,
        default_cache_dir(data_config),
        train_file=data_config.train_file if source == "local" else "",
        test_file=data_config.test_file if source == "local" else "",
        multi_label=data_config.label_key == "labels",
        drop_bad_rows=data_config.drop_bad_rows,
        group_key=data_config.group_key,
    )
    dropped = builder.dropped_rows()
    splits = {
        name: Split(
            builder.as_data_source(split=name), builder.source_path(name), dropped.get(name), _key(builder, name)
        )
        for name in builder.info.splits
    }
    return PreparedSplits(splits, _class_names(builder, data_config.label_key), ("text",))


def _catalogue_splits(data_config) -> PreparedSplits:
    if not data_config.name:
        raise ConfigError(
            "this config has no TFDS dataset (data.name is empty): it reads local files",
            hint=f"point --config.data.dir at local {data_config.format} files (the config's docstring says which)",
        )
    cache_dir = default_cache_dir(data_config)
    builder = _prepare_catalogue_dataset(data_config, cache_dir)
    if data_config.group_key and data_config.group_key not in builder.info.features:
        raise ConfigError(
            f"data.group_key: {data_config.name} has no feature {data_config.group_key!r} "
            f"(its features: {', '.join(builder.info.features)})"
        )
    splits = {
        name: Split(
            tfds.data_source(
                data_config.name, split=name, data_dir=cache_dir, builder_kwargs={"file_format": "array_record"}
            ),
            f"tfds:{data_config.name}/{name}",
            key=_key(builder, name),
        )
        for name in builder.info.splits
    }
    return PreparedSplits(splits, _class_names(builder, data_config.label_key), tuple(data_config.text_keys))


def _key(builder: tfds.core.DatasetBuilder, split: str) -> str:
    """The examples of `split` as `builder` prepared them: its folder (which names the dataset, its
    configuration and version) and the split's number of examples."""
    return f"{builder.data_dir}:{split}:{builder.info.splits[split].num_examples}"


def _class_names(builder: tfds.core.DatasetBuilder, label_key: str) -> list[str] | None:
    """The names of a `ClassLabel` label feature; None for string labels."""
    label = builder.info.features[label_key]
    return list(label.names) if hasattr(label, "names") else None


def prepare_series_splits(data_config) -> PreparedSplits:
    """The splits of a series dataset (`data.format` one of `choices.SeriesFormat`), prepared
    once, then held in memory."""
    check_choice("data.format", data_config.format, choices.SeriesFormat)
    cache_dir = default_cache_dir(data_config)
    builder = prepared_once(lambda: builders.SeriesBuilder(data_config=data_config, data_dir=cache_dir), cache_dir)
    splits = {
        name: Split(
            InMemorySplit.read(builder.as_data_source(split=name)), builder.source_path(name), key=_key(builder, name)
        )
        for name in builder.info.splits
    }
    return PreparedSplits(splits, _class_names(builder, "label"))


def prepare_local_files(data_format: str, directory: str, cache_dir: str, **kwargs) -> builders.TextFilesBuilder:
    """Prepares (once) and returns the builder of a local dataset."""
    check_choice("data.format", data_format, choices.TextFormat, ConfigError)
    builder_class = builders.TEXT_BUILDERS[data_format]
    return prepared_once(
        lambda: builder_class(directory=directory, data_dir=cache_dir, **kwargs),
        cache_dir,
    )


def prepared_once(make_builder: Callable[[], tfds.core.DatasetBuilder], cache_dir: str) -> tfds.core.DatasetBuilder:
    """A builder from `make_builder()` after `download_and_prepare`, serialised across processes
    by a file lock. A preparation that fails leaves no empty or half-written folders behind
    (`remove_new_directories`)."""
    # Several runs started at once on the same files (an ablation sweep) would race to rename
    # the same prepared folder into place; one prepares while the others wait, then reuse it.
    # The builder is made under the lock: one made before another process finished preparing
    # would keep the unprepared (split-less) info it read at construction.
    os.makedirs(cache_dir, exist_ok=True)
    with open(os.path.join(cache_dir, ".prepare.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = directories_under(cache_dir)
        try:
            builder = make_builder()
            damage = unreadable_split(builder) if builder.is_prepared() else None
            if damage is not None:
                builders.discard_damaged(builder.data_dir, damage)
                builder = make_builder()
            if not builder.is_prepared():
                # TFDS would print "Downloading and preparing dataset Unknown size ..." and
                # "... downloaded and prepared" for files that are already local.
                builder._log_download_bytes = builder._log_download_done = lambda: None
                print(f"preparing {builder.builder_config.description} into {builder.data_dir} (once)", flush=True)
            builder.download_and_prepare()
        except BaseException:
            remove_new_directories(cache_dir, before)
            raise
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return builder


def unreadable_split(builder: tfds.core.DatasetBuilder) -> str | None:
    """What does not read in a prepared dataset: a split whose records cannot be opened or whose
    first or last record cannot be read (a truncated or changed file: TFDS decodes a record
    array_record cannot find as one whose every feature is None); None when every split reads."""

    def missing(record) -> bool:
        return record is None or (isinstance(record, dict) and all(value is None for value in record.values()))

    for split in builder.info.splits:
        try:
            source = builder.as_data_source(split=split)
            if len(source) and (missing(source[0]) or missing(source[len(source) - 1])):
                return f"split {split}: records missing"
        except (OSError, ValueError, RuntimeError, KeyError) as error:  # array_record: RuntimeError
            return f"split {split}: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
    return None


def directories_under(root: str) -> set[str]:
    """Every directory under `root`, `root` included."""
    return {path for path, _, _ in os.walk(root)}


def _is_scratch(path: str, root: str) -> bool:
    """A folder only a preparation in progress writes: TFDS' temporary ones (`incomplete.<id>_1.0.0`,
    `....tmp.<hex>`) and jcaps' record of the rows dropped from each split."""
    name = os.path.basename(path)
    if name.startswith("incomplete.") or ".incomplete" in name or ".tmp." in name:
        return True
    return os.path.relpath(path, root).startswith("jcaps_dropped" + os.sep)


def remove_new_directories(root: str, before: set[str]) -> None:
    """Removes what a failed preparation left under `root`: each directory not in `before` that
    is empty (once its own leftovers are gone) or a scratch folder; others are kept."""
    for path, _, _ in os.walk(root, topdown=False):
        if path in before or path == root:
            continue
        if _is_scratch(path, root):
            shutil.rmtree(path, ignore_errors=True)
            continue
        try:
            os.rmdir(path)
        except OSError:  # not empty: it holds something this preparation did not make
            pass


@contextlib.contextmanager
def no_leftover_directories(root: str):
    """Runs a preparation into `root`; when it fails, `remove_new_directories`."""
    before = directories_under(root)
    try:
        yield
    except BaseException:
        remove_new_directories(root, before)
        raise


# ---------------------------------------------------------------------------------------------
# Catalogue datasets: downloaded once, after checking that the network is there at all
# ---------------------------------------------------------------------------------------------

# Before TFDS downloads a catalogue dataset (with retries that take minutes to give up offline),
# one TCP connection to this address says whether there is a network at all. The environment
# variable names another HOST:PORT, or 'off' to skip the check (e.g. behind an HTTPS proxy that
# only the download library knows how to use); an HTTPS proxy set in the environment is probed
# instead of the address.
DOWNLOAD_PROBE = "storage.googleapis.com:443"
DOWNLOAD_PROBE_ENV = "JCAPS_DOWNLOAD_PROBE"
DOWNLOAD_PROBE_TIMEOUT_S = 4.0


def download_probe_address() -> tuple[str, int] | None:
    """The (host, port) the download check connects to; None when it is switched off."""
    setting = os.environ.get(DOWNLOAD_PROBE_ENV, "").strip()
    if setting.lower() in ("off", "0", "none"):
        return None
    if not setting:
        proxy = urllib.request.getproxies().get("https")
        host = DOWNLOAD_PROBE.rsplit(":", 1)[0]
        if proxy and not urllib.request.proxy_bypass(host):
            parts = urllib.parse.urlsplit(proxy if "//" in proxy else "//" + proxy)
            if parts.hostname:
                return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
        setting = DOWNLOAD_PROBE
    host, _, port = setting.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"{DOWNLOAD_PROBE_ENV} must be HOST:PORT or 'off', not {setting!r}")
    return host, int(port)


def download_unreachable(address: tuple[str, int], timeout: float = DOWNLOAD_PROBE_TIMEOUT_S) -> str | None:
    """Why a TCP connection to `address` does not open within `timeout` seconds (name lookup
    included), or None when it does."""
    outcome: dict[str, object] = {}

    def connect():
        try:
            socket.create_connection(address, timeout=timeout).close()
            outcome["ok"] = True
        except OSError as error:
            outcome["error"] = error

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout)
    if outcome.get("ok"):
        return None
    return str(outcome.get("error") or f"no answer within {timeout:g} s")


def _offline_hint(data_config) -> str:
    return (
        f"point --config.data.dir at a folder of the dataset's files in data.format {data_config.format} (the "
        "config file's docstring says which files, and where to get them), or prepare the dataset on a machine "
        "with internet and copy its data.cache_dir here"
    )


def _prepare_catalogue_dataset(data_config, cache_dir: str):
    """The prepared TFDS builder of the catalogue dataset `data.name`: downloaded and prepared
    once into `cache_dir` when it is not there yet. Fails within seconds, as a `UserError`, when
    it is not there and the network is not reachable."""
    name = data_config.name
    try:
        builder = tfds.builder(name, data_dir=cache_dir, file_format="array_record")
    except tfds.core.registered.DatasetNotFoundError:
        raise ConfigError(
            f"data.name {name!r} is not a TFDS dataset",
            hint="see https://www.tensorflow.org/datasets/catalog, or " + _offline_hint(data_config),
        ) from None
    except Exception as error:  # e.g. the extra packages of a community catalogue
        raise UserError(
            f"could not open the TFDS dataset {name!r}: {error}", hint=_offline_hint(data_config)
        ) from error
    if builder.is_prepared():
        return builder
    # Catalogue datasets download their files; a builder defined elsewhere may not need to.
    if type(builder).__module__.startswith("tensorflow_datasets."):
        address = download_probe_address()
        if address and (problem := download_unreachable(address)):
            raise UserError(
                f"the TFDS dataset {name!r} is not prepared in {cache_dir} and cannot be downloaded: "
                f"{address[0]}:{address[1]} is unreachable ({problem})",
                hint=_offline_hint(data_config),
            )
    try:
        with no_leftover_directories(cache_dir):
            builder.download_and_prepare(file_format="array_record")
    except UserError:
        raise
    except Exception as error:  # network, missing extra packages
        raise UserError(
            f"could not prepare the TFDS dataset {name!r} in {cache_dir}: {error}", hint=_offline_hint(data_config)
        ) from error
    return builder
