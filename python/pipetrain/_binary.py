"""The `pipetrain` executable the package drives, and the one way it is run.

The ranks stay processes of the C++ runtime: Python hands them their job through the
same command line a user would type, and reads back what they wrote (a summary JSON, a
plan JSON, an exported model). A command that fails raises PipetrainError with the
executable's own one-line message."""
import difflib
import functools
import json
import os
import shutil
import signal
import subprocess

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
    """The folder pipetrain caches profiles and captures in (graph::ProfileCache's rule)."""
    for variable, suffix in (("PIPETRAIN_CACHE_DIR", ""), ("XDG_CACHE_HOME", "pipetrain/profiles"),
                             ("HOME", ".cache/pipetrain/profiles")):
        value = os.environ.get(variable)
        if value:
            return os.path.join(value, suffix) if suffix else value
    return os.path.join("/tmp", "pipetrain-profiles")


@functools.lru_cache(maxsize=None)
def train_options() -> tuple:
    """`pipetrain train`'s options as its table declares them (job/train_options.h): each
    a dict of name, keyword, group, help, flag (takes no value), list and choices."""
    return tuple(json.loads(run(["train", "--options-json"])))


def flags(options: dict, table=None) -> list:
    """Keywords as the command line's flags: `micro_batch=4` is `--micro-batch 4`, True a
    bare flag, False and None left out, a list or tuple one flag with several values.
    With `table` (train_options()), a keyword it does not hold is refused, with the
    nearest it does, and an option that takes true or false gets it spelt out."""
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
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag] + [str(v) for v in value]
        else:
            out += [flag, str(value)]
    return out


def _message(stderr: str, command: list) -> str:
    """The executable's own error line: its last line that says `error`, else its last line."""
    lines = [l.strip() for l in stderr.splitlines() if l.strip()]
    for line in reversed(lines):
        if "error" in line.lower():
            return line
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
