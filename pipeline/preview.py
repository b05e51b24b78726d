"""``--preview``: a window showing the processed frames with their fps and latency drawn on them.

The encode thread offers each frame (a copy of its I420 buffer, taken only when the window has shown
the previous one, so a slow window costs frames of the preview and never of the output); the main
thread, which otherwise only waits for the stages, shows the latest one: GUI toolkits want their
calls on the main thread. 'q' or Esc in the window stops the run like Ctrl-C.

OpenCV's Qt build aborts the whole process when it cannot reach a display, and a headless build has
no window at all: both are checked first (:func:`check_display`), and refused with one line.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path
from typing import Callable

import numpy as np

from .errors import ConfigError

WINDOW = "pipeline preview"


def check_display() -> None:
    """Refuse --preview, before anything is opened, where no window can be shown."""
    import cv2

    gui = _gui_backend(cv2.getBuildInformation())
    if gui in ("", "NONE"):
        raise ConfigError("--preview: this OpenCV build has no GUI (opencv-python-headless); "
                          "install opencv-python, or run without --preview")
    if sys.platform.startswith("linux") and not _x_display_reachable(os.environ.get("DISPLAY", "")):
        display = os.environ.get("DISPLAY")
        why = f"no X server answers at DISPLAY={display}" if display else "DISPLAY is not set"
        raise ConfigError(f"--preview: no display available ({why}); run without --preview or on a desktop")


def _gui_backend(build_info: str) -> str:
    for line in build_info.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "GUI":
            return value.strip().upper()
    return ""


def _x_display_reachable(display: str) -> bool:
    """Whether an X server answers at DISPLAY (``[host]:N[.screen]``); Qt aborts if none does."""
    host, sep, rest = display.rpartition(":")
    if not sep or not rest.split(".")[0].isdigit():
        return False
    number = int(rest.split(".")[0])
    try:
        if host in ("", "unix"):
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(1.0)
                s.connect(str(Path("/tmp/.X11-unix") / f"X{number}"))
        else:
            socket.create_connection((host, 6000 + number), timeout=1.0).close()
    except OSError:
        return False
    return True


class Preview:
    def __init__(self, on_quit: Callable[[], None]):
        import cv2

        self._cv2 = cv2
        self._on_quit = on_quit
        self._lock = threading.Lock()
        self._latest: tuple[np.ndarray, str] | None = None
        self._opened = False

    def wants_frame(self) -> bool:
        return self._latest is None  # the last one was shown: copy the next

    def offer(self, i420: np.ndarray, caption: str) -> None:
        """From the encode thread: a frame (copied here, the slot is reused) and the text to draw."""
        frame = np.array(i420, copy=True)
        with self._lock:
            self._latest = (frame, caption)

    def pump(self) -> None:
        """From the main thread: show the latest frame, if any, and handle the window's keys."""
        with self._lock:
            latest, self._latest = self._latest, None
        cv2 = self._cv2
        if latest is not None:
            frame, caption = latest
            bgr = cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420)
            cv2.putText(bgr, caption, (10, 30), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (0, 0, 0), 4, cv2.LINE_AA)
            cv2.putText(bgr, caption, (10, 30), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (255, 255, 255), 1, cv2.LINE_AA)
            cv2.imshow(WINDOW, bgr)
            self._opened = True
        if self._opened and cv2.waitKey(1) & 0xFF in (ord("q"), 27):
            self._on_quit()

    def close(self) -> None:
        if self._opened:
            self._cv2.destroyWindow(WINDOW)
            self._cv2.waitKey(1)
