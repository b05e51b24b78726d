"""One error hierarchy; each class maps to one documented exit code."""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_OUTPUT = 4
EXIT_GPU = 5
EXIT_SIGHUP = 129  # 128 + the signal's number, as a shell reports a process the signal ended
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class PipelineError(Exception):
    """Base of every error the pipeline reports to the user."""

    exit_code = 1

    def with_target(self, target) -> PipelineError:
        """The same error, its message prefixed with the file or URL it concerns."""
        self.args = (f"{target}: {self}",)
        return self


def no_threads(what: str) -> PipelineError:
    """``what`` could not start its threads: the system's limit, not the input, the settings or a bug (exit 1)."""
    return PipelineError(f"{what}; the limit on processes (ulimit -u, or the container's) or memory is exhausted")


class ConfigError(PipelineError, ValueError):
    """Bad command line, config file or filter chain. ``setting``: the :class:`~pipeline.config.RunConfig`
    field whose value was refused, where a check made after the config was read knows it (so the command
    line can name the config file the value came from)."""

    exit_code = EXIT_USAGE

    def __init__(self, *args, setting: str | None = None):
        super().__init__(*args)
        self.setting = setting


class InputError(PipelineError):
    """The input cannot be opened, demuxed or decoded."""

    exit_code = EXIT_INPUT


class SourceStalled(InputError):
    """A live input stopped delivering (no packet within the read timeout, or the connection was lost)
    and could not be reopened within ``--reconnect`` attempts. Unlike other input errors, the frames
    done before the stall are kept: the output is finalised and playable."""


class DecoderRefused(InputError):
    """The hardware decoder cannot take this stream (codec, profile, chroma format or size)."""


class OutputError(PipelineError):
    """The output cannot be created, written or finalised."""

    exit_code = EXIT_OUTPUT


class GPUError(PipelineError):
    """No usable GPU, out of device memory, or a CUDA error."""

    exit_code = EXIT_GPU


class GPUStalled(GPUError):
    """A frame's work on the GPU did not complete within the stall limit: a CUDA call that never returns.
    The threads stuck in it cannot be stopped; the CLI ends the process once the output is finalised."""

    happened = False  # set when raised: at exit the CLI skips the interpreter's clean-up, which would wait too


class StageError(PipelineError):
    """A user's own stage (``pipeline.run(..., stage=...)``) raised: the run ends as for a failing filter,
    its output discarded. The original exception is the ``__cause__``; ``stage`` names the stage."""

    def __init__(self, message: str, stage: str = ""):
        super().__init__(message)
        self.stage = stage

    def __reduce__(self):
        return type(self), (str(self), self.stage)


class PluginError(PipelineError):
    """A filter loaded with ``--plugin`` failed during the run: the message names the filter and its file.
    Exit 1, as for a bug, but the bug is the plugin's."""

    exit_code = EXIT_INTERNAL


class Interrupted(PipelineError):
    """SIGINT, SIGTERM or SIGHUP, or (``signum`` None) the application's ``Pipeline.stop()``: in-flight frames
    were drained and the output finalised."""

    def __init__(self, signum: int | None, detail: str = ""):
        import signal

        self.signum = signum
        self.exit_code = 128 + (signum or signal.SIGINT)  # EXIT_SIGINT, EXIT_SIGTERM, EXIT_SIGHUP
        what = f"interrupted by {signal.Signals(signum).name}" if signum else "stopped by Pipeline.stop()"
        super().__init__(what + (f"; {detail}" if detail else ""))
        self._made_from = (signum, detail)

    def __reduce__(self):  # pickled (a batch worker's, copy.copy) from what made it, not from its message
        return type(self), self._made_from


def stop_signals() -> list[int]:
    """The signals that stop a command cleanly: SIGTERM, and SIGINT and SIGHUP (the terminal closed) unless
    the process was started with them ignored: a background job of a script (``cmd &``) ignores SIGINT,
    ``nohup`` SIGHUP, and such a signal stays ignored."""
    import signal

    kept = [s for s in (signal.SIGINT, signal.SIGHUP) if signal.getsignal(s) is not signal.SIG_IGN]
    return [signal.SIGTERM, *kept]


SIGNAL_ECHO_S = 0.1


class SignalEchoes:
    """Whether a stop signal asks again or repeats the one just handled. ``timeout -s INT`` (without
    ``--foreground``) sends its signal to the command and then to the command's process group: the command
    gets it twice within microseconds (its handler may run a little later), and a second signal means "exit at
    once, no output". A person pressing Ctrl-C again does so later than :data:`SIGNAL_ECHO_S`."""

    def __init__(self):
        self._last: tuple[int, float] | None = None  # the last signal that was not an echo

    def echo(self, signum: int) -> bool:
        import time

        now = time.monotonic()
        if self._last is not None and self._last[0] == signum and now - self._last[1] < SIGNAL_ECHO_S:
            return True
        self._last = (signum, now)
        return False
