"""``--preview``: a window showing the processed frames with their fps and latency drawn on them.

The encode thread offers each frame (a copy of its I420 buffer, taken only when the window has shown
the previous one, so a slow window costs frames of the preview and never of the output); the main
thread, which otherwise only waits for the stages, shows the latest one: GUI toolkits want their
calls on the main thread. 'q' or Esc in the window, or closing it, stops the run like Ctrl-C.

The window is SDL's, through pygame-ce (the ``[preview]`` extra). OpenCV is the headless build (GPU
servers have no display, and OpenCV's GUI build conflicts with the headless one often installed
already), so here it only converts the frame to RGB and draws the caption. What can refuse is checked
before anything is opened (:func:`check_display`) and refused with one line: no pygame, no display.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from .errors import ConfigError
from .log import log

WINDOW = "pipeline preview"
INSTALL = "the [preview] extra, or pip install pygame-ce"
SCREEN_FRACTION = 0.9  # a frame larger than this part of the screen is shown scaled down


def _pygame():
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")  # else its import prints a banner on stdout
    try:
        import pygame
    except ImportError:
        raise ConfigError(f"--preview needs pygame-ce for its window ({INSTALL}); or run without --preview") from None
    return pygame


def check_display() -> None:
    """Refuse --preview, before anything is opened, where no window can be shown."""
    pygame = _pygame()
    if sys.platform.startswith("linux") and not os.environ.get("SDL_VIDEODRIVER"):
        # Checked before SDL tries: reaching an X server that does not answer can hang for a long time.
        display = os.environ.get("DISPLAY")
        if not os.environ.get("WAYLAND_DISPLAY") and not _x_display_reachable(display or ""):
            why = f"no X server answers at DISPLAY={display}" if display else "DISPLAY is not set"
            raise ConfigError(f"--preview: no display available ({why}); run without --preview or on a desktop")
    try:
        pygame.display.init()
    except pygame.error as e:
        raise ConfigError(f"--preview: no display available ({e}); run without --preview or on a desktop") from None
    finally:
        pygame.display.quit()  # the window opens with the first frame


def _x_display_reachable(display: str) -> bool:
    """Whether an X server answers at DISPLAY (``[host]:N[.screen]``)."""
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


class Window(Protocol):
    def show(self, rgb: np.ndarray) -> None: ...
    def quit_requested(self) -> bool: ...
    def close(self) -> None: ...


class SdlWindow:
    """A pygame-ce window, opened with the first frame at its size (scaled down to fit the screen)."""

    def __init__(self):
        self._pg = _pygame()
        self._screen = None
        self._size: tuple[int, int] = (0, 0)

    def show(self, rgb: np.ndarray) -> None:
        pg = self._pg
        h, w = rgb.shape[:2]
        if self._screen is None:
            pg.display.init()
            pg.display.set_caption(WINDOW)
            screens = pg.display.get_desktop_sizes()
            self._size = fit((w, h), screens[0] if screens else (0, 0))
            self._screen = pg.display.set_mode(self._size)
        if (w, h) != self._size:
            import cv2

            rgb = cv2.resize(rgb, self._size, interpolation=cv2.INTER_AREA)
        self._screen.blit(pg.image.frombuffer(np.ascontiguousarray(rgb), self._size, "RGB"), (0, 0))
        pg.display.flip()

    def quit_requested(self) -> bool:
        if self._screen is None:
            return False
        pg = self._pg
        return any(e.type == pg.QUIT or (e.type == pg.KEYDOWN and e.key in (pg.K_q, pg.K_ESCAPE))
                   for e in pg.event.get())

    def close(self) -> None:
        if self._screen is not None:
            self._pg.display.quit()
            self._screen = None


def fit(size: tuple[int, int], screen: tuple[int, int]) -> tuple[int, int]:
    """``size`` scaled down, aspect kept, to at most SCREEN_FRACTION of ``screen`` (never up)."""
    w, h = size
    scale = min(1.0, SCREEN_FRACTION * screen[0] / w, SCREEN_FRACTION * screen[1] / h) if all(screen) else 1.0
    return max(1, round(w * scale)), max(1, round(h * scale))


def eight_bit_i420(buf: np.ndarray, fmt) -> np.ndarray:
    """A host slot's output frame as the window shows it: 8-bit I420 (a 10-bit frame's samples shifted down,
    a new array; an 8-bit one is a view, which :meth:`Preview.offer` copies)."""
    if fmt.depth > 8:
        return (buf.view(np.uint16)[:fmt.nbytes] >> 2).astype(np.uint8).reshape(fmt.shape)
    return buf[:fmt.nbytes].reshape(fmt.shape)


def render(i420: np.ndarray, caption: str) -> np.ndarray:
    """The I420 frame as RGB with the caption drawn on it (outlined, readable on any picture)."""
    import cv2

    rgb = cv2.cvtColor(i420, cv2.COLOR_YUV2RGB_I420)
    # The outline is the text itself, shifted around: a thicker stroke would also advance each glyph
    # further (OpenCV adds the thickness to the advance), and drift away from the text along the line.
    for dx, dy in ((-2, 0), (2, 0), (0, -2), (0, 2), (-1, -1), (1, 1), (-1, 1), (1, -1)):
        cv2.putText(rgb, caption, (10 + dx, 30 + dy), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (0, 0, 0), 2, cv2.LINE_AA)
    cv2.putText(rgb, caption, (10, 30), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (255, 255, 255), 2, cv2.LINE_AA)
    return rgb


class Preview:
    def __init__(self, on_quit: Callable[[], None], *, window: Window | None = None):
        self._window = window if window is not None else SdlWindow()
        self._on_quit = on_quit
        self._lock = threading.Lock()
        self._latest: tuple[np.ndarray, str] | None = None
        self._failed = False

    def wants_frame(self) -> bool:
        return self._latest is None and not self._failed  # the last one was shown: copy the next

    def offer(self, i420: np.ndarray, caption: str) -> None:
        """From the encode thread: a frame (copied here, the slot is reused) and the text to draw."""
        frame = np.array(i420, copy=True)
        with self._lock:
            self._latest = (frame, caption)

    def pump(self) -> None:
        """From the main thread: show the latest frame, if any, and handle the window's keys."""
        if self._failed:
            return
        with self._lock:
            latest, self._latest = self._latest, None
        try:
            if latest is not None:
                self._window.show(render(*latest))
            quit_requested = self._window.quit_requested()
        except Exception as e:  # the window is a view of the run, not part of it: the run goes on without it
            self._failed = True
            log.warning(f"--preview: the window failed ({type(e).__name__}: {e}); the run goes on without it")
            self.close()
            return
        if quit_requested:
            self._on_quit()

    def close(self) -> None:
        try:
            self._window.close()
        except Exception as e:
            log.debug(f"--preview: closing the window failed: {e}")
