"""What every command shares: how user errors are shown, and how flags are parsed.

`run(main)` replaces `absl.app.run(main)`: a `jcaps.errors.UserError` (and a flag or config
override the parser rejects) prints `error: <message>` on stderr, then `hint: <hint>` when there
is one, and exits with status 2. Set `JCAPS_DEBUG=1` to see the traceback instead. Other
exceptions are bugs and keep their traceback. Ctrl-C prints one line and exits with status 130.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import traceback
from collections.abc import Callable
from typing import get_args

from absl import app, flags
from absl import logging as absl_logging

from jcaps.errors import UserError

# The `jcaps COMMAND` of each command's module. Each module defines its flags when run as a
# program, so `jcaps COMMAND` runs it as `__main__`, exactly as `python -m MODULE` does.
COMMAND_MODULES = {
    "train": "jcaps.train_command",
    "evaluate": "jcaps.evaluate",
    "predict": "jcaps.predict",
    "interpret": "jcaps.interpret",
    "params": "jcaps.params",
    "configs": "jcaps.list_configs",
}

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT  # as a shell reports a command Ctrl-C stopped
# The logger of the JAX module that probes backends (an internal module's name: JAX offers no
# public handle on these records).
BACKEND_PROBE_LOGGER = "jax._src.xla_bridge"


class _OptionalBackendProbe(logging.Filter):
    """Drops JAX's INFO record of an optional backend it probed and could not start."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno <= logging.INFO and record.getMessage().startswith("Unable to initialize backend"))


def quiet_backend_discovery() -> None:
    """With JAX_PLATFORMS unset JAX probes every backend it knows and logs, at INFO, each one it
    cannot start (`Unable to initialize backend 'tpu': ... libtpu.so`). Leaves out that one
    message; a backend named in JAX_PLATFORMS that fails still raises, and warnings still show."""
    logger = logging.getLogger(BACKEND_PROBE_LOGGER)
    if not any(isinstance(f, _OptionalBackendProbe) for f in logger.filters):
        logger.addFilter(_OptionalBackendProbe())


def quiet_library_logs() -> None:
    """The libraries' INFO records (matplotlib's `generated new fontManager`, orbax's saves) stay
    off stderr: Python's logging at WARNING, unless the user asked for more with `--verbosity`."""
    if not flags.FLAGS["verbosity"].present:
        absl_logging.set_verbosity(absl_logging.WARNING)


def _one_line(text: object) -> str:
    """`text` (an error, say) as one line: its whitespace runs made single spaces."""
    return " ".join(str(text).split())


def report(error: UserError) -> None:
    """Prints `error` as the user sees it (`error: ...` and `hint: ...` on stderr)."""
    print(f"error: {_one_line(error)}", file=sys.stderr, flush=True)
    if error.hint:
        print(f"hint: {_one_line(error.hint)}", file=sys.stderr, flush=True)


def _config_key_message(error: Exception) -> str:
    """ml_collections reports a misspelt key as `'\\'batch_sise\\'\\nDid you mean ...'` inside
    a KeyError or AttributeError: unwrap it into `'batch_sise': Did you mean ...`."""
    text = error.args[0] if error.args else str(error)
    while isinstance(text, BaseException):
        text = text.args[0] if text.args else str(text)
    text = str(text)
    if len(text) >= 2 and text[0] == text[-1] == "'" and "\\n" in text:
        text = text[1:-1].replace("\\'", "'").replace('\\"', '"').replace("\\n", "\n")
    return _one_line(text)


def _unknown_key_message(message: str, argv: list[str]) -> str:
    """`--config.train.batch_sise: no such config key; did you mean "batch_size"?` from
    ml_collections' `'batch_sise' Did you mean "batch_size" instead of "batch_sise"?`."""
    key = re.match(r"'([^']+)'", message)
    flag = None
    if key:
        names = (argument.split("=", 1)[0] for argument in argv[1:] if argument.startswith("--config."))
        flag = next((name for name in names if key.group(1) in name.split(".")), None)
    if flag is None:
        return f"bad --config.* flag: {message}"
    suggestion = re.search(r'Did you mean "([^"]+)"', message)
    return f"{flag}: no such config key" + (f'; did you mean "{suggestion.group(1)}"?' if suggestion else "")


def _renamed_key_message(argv: list[str]) -> str | None:
    """`config.model.embedding_dim was renamed model.embed_dim` for the first `--config.model.KEY`
    override in `argv` of a key renamed in the configs of the model its config file names, or
    None. The flag parser has not set the config when an override fails: the file is read again."""
    from jcaps.train.config import load  # ml_collections and the standard library only
    from jcaps.train.config_history import new_name

    for argument in argv[1:]:
        flag = argument.split("=", 1)[0].removeprefix("--")
        root, _, key = flag.partition(".model.")
        path = _flag_value(argv, root) if key else None
        if path is None:
            continue
        try:
            model_name = load(path).model.name
        except Exception:  # noqa: BLE001, S112 (the file's own error is reported as it is)
            continue
        renamed = new_name("model", key, model_name)
        if renamed:
            return f"{flag} was renamed model.{renamed}"
    return None


def _flag_value(argv: list[str], name: str) -> str | None:
    """The value `argv` gives the flag `--name` (`--name=VALUE` or `--name VALUE`), or None."""
    for index, argument in enumerate(argv):
        if argument.startswith(f"--{name}="):
            return argument.split("=", 1)[1]
        if argument == f"--{name}" and index + 1 < len(argv):
            return argv[index + 1]
    return None


def _flag_error_message(error: flags.Error) -> str:
    """absl's message, with a config file's embedded traceback cut down to its last line."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    if len(lines) > 1 and any(line.startswith("Traceback") for line in lines):
        flag = lines[0].split(": Error whilst parsing config file", 1)[0]
        return f"{flag}: {lines[-1].strip()}"
    return " ".join(lines)


def _check_config_files_loaded() -> None:
    """ml_collections keeps a config file that failed to load as a stand-in that raises on first
    use, deep inside training: raise it now, as a user error."""
    for name in flags.FLAGS:
        value = flags.FLAGS[name].value
        load_error = vars(value).get("_error") if type(value).__name__ == "_ErrorConfig" else None
        if load_error is None:
            continue
        path = getattr(flags.FLAGS[name], "_config_filename", "")
        if "No such file or directory" in str(load_error):
            raise UserError(_config_not_found_message(name, path), hint="jcaps configs lists the shipped configs")
        raise UserError(f"--{name}: config file {path} does not load: {_one_line(load_error)}")


def _config_not_found_message(flag: str, path: str) -> str:
    """`--config: no shipped config or file fasttxt_ag_news; did you mean "fasttext_ag_news"?` for a
    bare name (a misspelt shipped config), `--config: config file PATH not found` for a path."""
    from jcaps.train.config import closest_config_name  # ml_collections and the standard library only

    name = path.partition(":")[0]
    if os.sep in name or name.endswith(".py"):
        return f"--{flag}: config file {name} not found"
    closest = closest_config_name(name)
    return f"--{flag}: no shipped config or file {name}" + (f'; did you mean "{closest}"?' if closest else "")


def _user_code_line(error: BaseException) -> str | None:
    """FILE:LINE of the last frame of `error`'s traceback, below the flag parser, outside Python
    and its installed libraries (a config file's, or jcaps' own that it calls), or None."""
    libraries = (sys.prefix, sys.base_prefix, "<")
    frames = traceback.extract_tb(error.__traceback__)[1:]  # the first is parse_flags'
    frames = [frame for frame in frames if not frame.filename.startswith(libraries)]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None


def _with_shipped_configs_resolved(argv: list[str]) -> list[str]:
    """`--config NAME[:ARG]` naming a shipped config, rewritten to its file's path."""
    from jcaps.train.config import resolve  # ml_collections and the standard library only

    resolved, follows_config_flag = [], False
    for argument in argv:
        if follows_config_flag:
            argument = resolve(argument)
        elif argument.startswith("--config="):
            argument = "--config=" + resolve(argument.removeprefix("--config="))
        follows_config_flag = argument == "--config"
        resolved.append(argument)
    return resolved


# absl's --help lists only the main module's flags, under the module's file path, and exits 1.
HELP_FLAGS = {"-h", "-?", "--help", "--helpshort"}


def print_help(program: str) -> None:
    """The command's docstring and every flag jcaps defines for it (absl's and the libraries' own
    left to --helpfull)."""
    main_module = sys.modules.get("__main__")
    print((getattr(main_module, "__doc__", None) or f"{program} [FLAGS]").strip(), end="\n\nflags:\n")
    # absl names a module run as a program by its file's path, the others by their dotted names.
    jcaps_flags = {
        flag.name: flag
        for module, module_flags in flags.FLAGS.flags_by_module_dict().items()
        if module.startswith("jcaps") or os.sep in module
        for flag in module_flags
    }
    for flag in sorted(jcaps_flags.values(), key=lambda flag: flag.name):
        print(_one_flag_help(flag))
    print("\nthe libraries' own flags (logging, debugging): --helpfull")


def _one_flag_help(flag: flags.Flag) -> str:
    default = "" if flag.default is None else f" (default: {flag.default_as_str})"
    return f"  --{flag.name}: {flag.help}{default}"


def program_name(argv0: str) -> str:
    """How the user runs this command: `jcaps train` for `jcaps train` and `python -m
    jcaps.train_command` alike (the command every install has), else the program's file name
    (`train.py` in a checkout)."""
    if argv0.startswith("jcaps "):
        return argv0
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    module = spec.name.removesuffix(".__main__") if spec is not None else None
    command = next((name for name, command_module in COMMAND_MODULES.items() if command_module == module), None)
    return f"jcaps {command}" if command else os.path.basename(argv0)


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parser with jcaps' error style (the `flags_parser` of `app.run`)."""
    hint = f"see {program_name(argv[0])} --help"
    if HELP_FLAGS.intersection(argv[1:]):
        print_help(argv[0])
        sys.exit(0)
    try:
        remaining = flags.FLAGS(_with_shipped_configs_resolved(argv))
    except flags.Error as error:
        raise UserError(_renamed_key_message(argv) or _flag_error_message(error), hint=hint) from error
    except SyntaxError as error:  # a --config file that is not Python
        raise UserError(f"{error.filename}:{error.lineno}: {error.msg} (a --config file)", hint=hint) from error
    except (KeyError, AttributeError, TypeError, ValueError, OSError) as error:
        # A `--config.KEY=VALUE` override naming a key the config does not have.
        message = _renamed_key_message(argv) or _unknown_key_message(_config_key_message(error), argv)
        raise UserError(message, hint=hint) from error
    except Exception as error:
        # Any other error of a --config file's code (an import that fails, a name undefined).
        where = _user_code_line(error)
        if where is None:
            raise
        raise UserError(
            f"{where}: {type(error).__name__}: {_one_line(error)} (running a --config file)", hint=hint
        ) from error
    _check_config_files_loaded()
    return remaining


def run(main: Callable[[list[str]], object], *, skip_teardown: bool = False) -> None:
    """`app.run(main)` in which user errors are one line and exit with status 2.

    `skip_teardown`: when `main` returns, flush the output and end the process at once, without
    the interpreter's teardown (freeing every module and XLA's runtime takes about a quarter of a
    second, longer than a command that reads a workdir takes to answer). Only for commands that
    leave nothing to finish: every file they wrote is closed, no thread still works."""

    def main_with_usage_errors(argv):
        quiet_library_logs()
        try:
            result = main(argv)
        except app.UsageError as error:
            raise UserError(str(error), hint=f"see {program_name(argv[0])} --help") from error
        if skip_teardown and result is None:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        return result

    quiet_backend_discovery()
    try:
        app.run(main_with_usage_errors, flags_parser=parse_flags)
    except UserError as error:
        if os.environ.get("JCAPS_DEBUG", "") not in ("", "0"):
            raise
        report(error)
        sys.exit(EXIT_USER_ERROR)
    except KeyboardInterrupt:  # Ctrl-C where the command handles no signal: one line, the shell's status
        print("interrupted by SIGINT", file=sys.stderr, flush=True)
        sys.exit(EXIT_INTERRUPTED)


# The data keys a command that reads a trained workdir's data may change: they move the data,
# not alter it. Spelt as train.py takes them, so an error's hint to set one works everywhere.
DATA_LOCATION_KEYS = ("dir", "cache_dir")

# Trust boundary: a workdir is data (it may come from someone else), so the commands that read
# one never take a location to write to or load compiled code from out of its config.json:
# prepared data goes where --config.data.cache_dir says, else to data.cache_dir's default
# (~/tensorflow_datasets), and compiled programs to --compilation_cache (default: the user's
# cache, under $XDG_CACHE_HOME).


def define_data_location_flags() -> None:
    """`--config.data.dir` and `--config.data.cache_dir` for evaluate and interpret."""
    flags.DEFINE_string("config.data.dir", None, "Read the data from this folder instead of the workdir's data.dir.")
    flags.DEFINE_string(
        "config.data.cache_dir",
        None,
        "Prepared data lives here (default: ~/tensorflow_datasets; never the workdir's data.cache_dir).",
    )


def data_location_overrides() -> dict[str, str]:
    """{key: value} of the data-location flags given on the command line; `cache_dir` always, ''
    (the default location) when not given, so that the workdir's own is never used."""
    values = {key: flags.FLAGS[f"config.data.{key}"].value for key in DATA_LOCATION_KEYS}
    return {"cache_dir": "", **{key: value for key, value in values.items() if value is not None}}


def define_compilation_cache_flag() -> None:
    """`--compilation_cache` for the commands that compile a workdir's model."""
    flags.DEFINE_string(
        "compilation_cache",
        "auto",
        "Persistent compilation cache: 'auto' ($XDG_CACHE_HOME/jcaps/jax), a directory, or '' (off); "
        "never the workdir's train.compilation_cache.",
    )


# The model keys a command that scores a trained workdir may change: they turn the model's scores
# into a label set (SGM's search, binary relevance's threshold), without touching its parameters,
# so settings like these can be chosen on validation data after training.
DECODING_KEYS: dict[str, Callable[..., object]] = {
    "decoding": flags.DEFINE_string,
    "beam_size": flags.DEFINE_integer,
    "max_steps": flags.DEFINE_integer,
    "length_penalty": flags.DEFINE_float,
    "eos_threshold": flags.DEFINE_float,
    "threshold": flags.DEFINE_float,
}


def define_decoding_flags() -> None:
    """`--config.model.KEY` for each of `DECODING_KEYS`, for evaluate."""
    for key, define in DECODING_KEYS.items():
        define(
            f"config.model.{key}",
            None,
            f"Score with this model.{key} instead of the workdir's (a decoding setting; the parameters are the same).",
        )


def decoding_overrides() -> dict:
    """{key: value} of the decoding flags given on the command line."""
    values = {key: flags.FLAGS[f"config.model.{key}"].value for key in DECODING_KEYS}
    return {key: value for key, value in values.items() if value is not None}


# The environment variables by which JAX's `jax.distributed.initialize()` finds, without any
# argument, the processes of a job that a cluster's launcher started: {cluster: (the variables
# it reads, the one that counts the job's processes)}. Where they say several processes, the
# commands join them without a flag; other clusters (TPU pods, GCE, Kubernetes) are found by
# asking services, which `--num_processes auto` leaves to JAX.
CLUSTER_VARIABLES = {
    "Slurm": (("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID"), "SLURM_NTASKS"),
    "Open MPI": (
        ("OMPI_MCA_orte_hnp_uri", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),
        "OMPI_COMM_WORLD_SIZE",
    ),
}


def detected_cluster(environ=os.environ) -> str | None:
    """The cluster of `CLUSTER_VARIABLES` whose variables `environ` sets for a job of several
    processes, or None."""
    for cluster, (variables, count) in CLUSTER_VARIABLES.items():
        if all(name in environ for name in variables) and environ[count].strip().isdigit() and int(environ[count]) > 1:
            return cluster
    return None


def define_process_flags() -> None:
    """`--num_processes`, `--process_id` and `--coordinator_address` (or the environment variables
    JAX_NUM_PROCESSES, JAX_PROCESS_ID, JAX_COORDINATOR_ADDRESS) for the commands that several
    processes run together (`jax.distributed`)."""
    flags.DEFINE_string(
        "coordinator_address",
        os.environ.get("JAX_COORDINATOR_ADDRESS", ""),
        "Multi-process runs: HOST:PORT of process 0's coordinator (with auto: found by JAX when not given).",
    )
    flags.DEFINE_string(
        "num_processes",
        os.environ.get("JAX_NUM_PROCESSES", ""),
        "Multi-process runs: how many processes run together, or auto: jax.distributed finds the job's "
        "processes (Slurm, Open MPI, TPU pods, GCE, Kubernetes). Not given: one process, or a Slurm or "
        "Open MPI job's processes where its environment names several.",
    )
    flags.DEFINE_integer(
        "process_id",
        int(os.environ["JAX_PROCESS_ID"]) if os.environ.get("JAX_PROCESS_ID", "").isdigit() else None,
        "Multi-process runs: this process's index, 0 .. num_processes - 1 (default 0; with auto: found by JAX).",
    )


def initialize_processes() -> None:
    """Joins the run's processes (`define_process_flags`; nothing for one process)."""
    from jcaps.train.mesh import initialize_distributed

    requested = flags.FLAGS.num_processes.strip()
    coordinator, process_id = flags.FLAGS.coordinator_address or None, flags.FLAGS.process_id
    if requested == "auto" or (requested == "" and detected_cluster() is not None):
        initialize_distributed(coordinator, None, process_id)
        return
    if requested and not (requested.isdigit() and int(requested) >= 1):
        raise app.UsageError(f"--num_processes must be a count >= 1 or auto, not {requested!r}")
    count = int(requested or "1")
    if count > 1 and coordinator is None:
        raise app.UsageError("--num_processes > 1 needs --coordinator_address HOST:PORT (or --num_processes auto)")
    if count > 1:
        initialize_distributed(coordinator, count, process_id or 0)


def define_parameters_flag() -> None:
    """`--parameters` for the commands that load a trained workdir (`jcaps.train.workdir.load_trained`)."""
    from jcaps.train.config import ParameterChoice  # ml_collections and the standard library only

    choices = get_args(ParameterChoice)
    flags.DEFINE_enum(
        "parameters",
        choices[0],
        list(choices),
        "final: the parameters training reported as final (the best on validation when it selected "
        "them, else the last checkpoint's); last: those of the newest checkpoint that is intact, for a "
        "workdir whose final parameters are damaged.",
    )
