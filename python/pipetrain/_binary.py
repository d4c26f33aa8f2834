"""The `pipetrain` executable the package drives, and the one way it is run.

The ranks stay processes of the C++ runtime: Python hands them their job through the
same command line a user would type, and reads back what they wrote (a summary JSON, a
plan JSON, an exported model). A command that fails raises PipetrainError with the
executable's own one-line message."""
import difflib
import functools
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sysconfig
import warnings

from ._progress import Progress


class PipetrainError(RuntimeError):
    """What pipetrain refused or failed at, in its own words (one line)."""


def executable() -> str:
    """$PIPETRAIN_BIN, else the build beside this checkout (build/pipetrain), else the
    `pipetrain` on PATH."""
    named = os.environ.get("PIPETRAIN_BIN")
    if named:
        if not os.access(named, os.X_OK):
            raise PipetrainError(f"$PIPETRAIN_BIN={named} is not an executable file")
        return named
    beside = os.path.join(os.path.dirname(__file__), "..", "..", "build", "pipetrain")
    if os.access(beside, os.X_OK):
        return os.path.abspath(beside)
    found = shutil.which("pipetrain")
    if found:
        return found
    raise PipetrainError("no pipetrain executable: build it (`make build` in the checkout), put it on PATH, "
                         "or name it in $PIPETRAIN_BIN")


def cache_dir() -> str:
    """The folder pipetrain caches profiles and captures in, as the C++ side decides it
    (graph::ProfileCache::defaultDir)."""
    module = native()
    return module.cache_dir() if module else run(["--cache-dir"]).strip()


@functools.lru_cache(maxsize=None)
def native():
    """pipetrain's core library loaded into this process (schedules, simulations, plans),
    from beside the executable, where it was built for this Python; else None, and those
    calls run the executable instead (the same C++ either way)."""
    path = os.path.join(os.path.dirname(executable()), "pipetrain_native" + sysconfig.get_config_var("EXT_SUFFIX"))
    if not os.path.isfile(path):
        return None
    spec = importlib.util.spec_from_file_location("pipetrain_native", path)
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError as e:  # built against another libpython or core: say so, and go on without it
        warnings.warn(f"{path} does not load ({e}); schedules, simulations and plans run the executable instead")
        return None
    return module


@functools.lru_cache(maxsize=None)
def train_options() -> tuple:
    """`pipetrain train`'s options as its table declares them (job/train_options.h): each
    a dict of name, keyword, group, help, flag (takes no value), list and choices."""
    return tuple(json.loads(run(["train", "--options-json"])))


def values(options: dict, table=None) -> list:
    """Keywords as the options' names and values, as the command line gives them:
    `micro_batch=4` is ("micro-batch", ["4"]), True a flag (no value), False and None
    left out, a list or tuple several values. With `table` (train_options()), a keyword it
    does not hold is refused, with the nearest it does, and an option that takes true or
    false gets it spelt out."""
    known = {o["keyword"]: o for o in table} if table is not None else None
    out = []
    for key, value in options.items():
        option = known.get(key) if known is not None else None
        if known is not None and option is None:
            near = difflib.get_close_matches(key, known, n=1)
            raise PipetrainError(f"no option {key}=" + (f"; did you mean {near[0]}=?" if near else
                                                         " (pipetrain.train_options() lists them)"))
        if isinstance(value, bool) and option is not None and not option["flag"]:
            value = str(value).lower()
        if value is None or value is False:
            continue
        given = [] if value is True else [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
        out.append((key.replace("_", "-"), given))
    return out


def flags(options: dict, table=None) -> list:
    """The same as the command line's flags: `--micro-batch 4`, a bare `--flag` for True."""
    return [word for name, given in values(options, table) for word in ["--" + name, *given]]


def native_values(options: dict) -> list:
    """The same as pipetrain_native takes them: a flag's value is "true"."""
    return [(name, given or ["true"]) for name, given in values(options)]


def _message(stderr: str, command: list) -> str:
    """The executable's own error line, without its "pipetrain: error: " (the message
    pipetrain_native raises): its last line that says `error`, else its last line."""
    lines = [l.strip() for l in stderr.splitlines() if l.strip()]
    for line in reversed(lines):
        if "error" in line.lower():
            return line.removeprefix("pipetrain: error: ")
    return lines[-1] if lines else f"`{' '.join(command[:2])}` failed without a message"


def run(args: list, echo: bool = False) -> str:
    """Runs `pipetrain ARGS`; returns its standard output. With `echo`, its output is
    passed on line by line as it comes, its progress lines as a bar in a notebook.
    Ctrl-C (KeyboardInterrupt) stops the command and its ranks with SIGINT, as Ctrl-C in
    a terminal would, then re-raises."""
    command = [executable()] + [str(a) for a in args]
    # A session of its own, so that an interrupt reaches every rank the launcher started.
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if echo else subprocess.PIPE,
                               text=True, start_new_session=True)
    captured = []
    shown = Progress() if echo else None
    try:
        if echo:
            for line in process.stdout:
                captured.append(line)
                shown.line(line)
            stderr = "".join(captured)
            process.wait()
            stdout = stderr
        else:
            stdout, stderr = process.communicate()
    except KeyboardInterrupt:
        _stop(process)
        raise
    finally:
        if shown:
            shown.close()
    if process.returncode != 0:
        raise PipetrainError(_message(stderr, command))
    return stdout


def _stop(process: subprocess.Popen, grace_seconds: float = 20) -> None:
    """SIGINT to the command's whole session (launcher and ranks), then SIGKILL to what
    is left after `grace_seconds`. A checkpoint cut off while it was being written has no
    manifest and is passed over by --resume; the newest complete one stays intact
    (docs/checkpoints.md)."""
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass
