"""The synthetic picture of ``pipeline sample``'s clips: frame ``index`` as RGB, with texture, gradients,
moving shapes and a large frame counter (:func:`synth_frame`).

Only NumPy and OpenCV, no codec: the picture is what a test compares decoded frames against, and
:mod:`pipeline.sample` turns it into pixel formats and clips.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import cv2
import numpy as np

# cv2 accepts fractional coordinates as fixed point; 4 bits gives 1/16 px
# steps, so slow shapes still move smoothly instead of jumping a whole pixel.
SUBPIXEL_BITS = 4
SUBPIXEL = 1 << SUBPIXEL_BITS


@dataclass(frozen=True)
class Shape:
    kind: str  # "circle" or "box"
    size: float  # radius, or half the side of a box
    colour: tuple[int, int, int]
    start: tuple[float, float]  # phase along the bounce path, in pixels
    velocity: tuple[float, float]  # pixels per frame
    spin: float  # radians per frame (boxes only)


@dataclass(frozen=True)
class Scene:
    texture: np.ndarray  # (H + margin_y, W + margin_x, 3) uint8, read-only
    margin_x: int
    margin_y: int
    band_split: int  # rows above scroll with (vx, vy), rows below with (vx2, vy)
    vx: int
    vx2: int
    vy: int
    shapes: tuple[Shape, ...]


def _bounce(t: float, span: float) -> float:
    """Triangle wave in [0, span]: motion that reverses instead of wrapping,
    so the texture never needs to tile and never shows a seam."""
    if span <= 0:
        return 0.0
    p = t % (2 * span)
    return p if p <= span else 2 * span - p


def _texture(width: int, height: int, rng: np.random.Generator) -> np.ndarray:
    """Static background: smooth gradients, soft clouds, edges and fine grain.

    Feature sizes scale with the frame, so every resolution shows the same
    picture rather than a 4K clip being four times busier than a 1080p one.
    """
    yy = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]
    xx = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :]
    phase = rng.uniform(0, 2 * np.pi, 3).astype(np.float32)
    tex = np.empty((height, width, 3), np.float32)
    tex[..., 0] = 128 + 80 * np.sin(2.2 * xx + phase[0]) * np.cos(1.3 * yy)
    tex[..., 1] = 128 + 80 * np.cos(1.7 * yy + phase[1])
    tex[..., 2] = 128 + 80 * np.sin(1.5 * (xx + yy) + phase[2])

    # Soft structure that motion estimators can lock onto: broad clouds plus
    # a finer, fainter octave.
    short = min(width, height)
    for cells_per_short, sigma in ((12, 30.0), (48, 12.0)):
        tex += _clouds(width, height, short / cells_per_short, sigma, rng)

    # Fine grain, shared by all channels like real sensor luma noise.
    tex += rng.normal(0, 5, (height, width, 1)).astype(np.float32)

    out = np.clip(tex, 0, 255).astype(np.uint8)
    _draw_edges(out, rng)
    return out


def _clouds(width: int, height: int, cell: float, sigma: float, rng) -> np.ndarray:
    """Smooth noise with features about ``cell`` pixels across.

    Blurred at 4 samples per cell before upscaling: plain cubic upscaling of
    white noise leaves a visible lattice, and blurring at full size would
    take seconds at 4K.
    """
    cell = max(1.0, cell)
    gh = max(2, round(4 * height / cell))
    gw = max(2, round(4 * width / cell))
    noise = cv2.GaussianBlur(rng.normal(0, 1, (gh, gw, 3)).astype(np.float32), (0, 0), 2.0)
    noise *= sigma / max(float(noise.std()), 1e-6)
    return cv2.resize(noise, (width, height), interpolation=cv2.INTER_CUBIC)


def _draw_edges(img: np.ndarray, rng: np.random.Generator) -> None:
    """Hard-edged outlines: the high-contrast detail that ringing and
    blocking artefacts show up on."""
    h, w = img.shape[:2]
    unit = max(1, min(w, h) // 360)
    for _ in range(24):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        rw = int(rng.integers(4, max(5, w // 5)))
        rh = int(rng.integers(4, max(5, h // 5)))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        thickness = int(rng.integers(1, 4)) * unit
        cv2.rectangle(img, (x0, y0), (x0 + rw, y0 + rh), colour, thickness)


def _shapes(width: int, height: int, rng: np.random.Generator) -> tuple[Shape, ...]:
    short = min(width, height)
    speed = max(1.0, width / 320)
    shapes = []
    for k in range(6):
        shapes.append(
            Shape(
                kind="circle" if k % 2 == 0 else "box",
                size=float(rng.uniform(0.05, 0.12) * short) + 1.0,
                colour=tuple(int(c) for c in rng.integers(30, 256, 3)),
                start=(float(rng.uniform(0, 2 * width)), float(rng.uniform(0, 2 * height))),
                velocity=(
                    float(rng.uniform(0.5, 2.5) * speed * rng.choice((-1, 1))),
                    float(rng.uniform(0.3, 1.5) * speed * rng.choice((-1, 1))),
                ),
                spin=float(rng.uniform(-0.08, 0.08)),
            )
        )
    return tuple(shapes)


@functools.lru_cache(maxsize=4)
def _scene(width: int, height: int, seed: int) -> Scene:
    """Everything that does not change from frame to frame, built once so a
    frame costs one copy plus a few small drawing calls."""
    rng = np.random.default_rng([seed, width, height])
    margin_x = max(16, width // 4)
    margin_y = max(8, height // 8)
    texture = _texture(width + margin_x, height + margin_y, rng)
    texture.flags.writeable = False  # shared by every caller through the cache
    base = max(1, width // 640)
    vx = int(rng.integers(1, 3)) * base * int(rng.choice((-1, 1)))
    return Scene(
        texture=texture,
        margin_x=margin_x,
        margin_y=margin_y,
        band_split=(2 * height) // 3,
        vx=vx,
        vx2=-2 * vx,  # the lower band moves faster the other way, like parallax
        vy=max(1, height // 720),
        shapes=_shapes(width, height, rng),
    )


def _paste_background(out: np.ndarray, scene: Scene, index: int) -> None:
    h, w = out.shape[:2]
    split = scene.band_split
    oy = int(_bounce(index * scene.vy, scene.margin_y))
    ox = int(_bounce(index * scene.vx, scene.margin_x))
    ox2 = int(_bounce(index * scene.vx2 + scene.margin_x // 2, scene.margin_x))
    out[:split] = scene.texture[oy : oy + split, ox : ox + w]
    out[split:] = scene.texture[oy + split : oy + h, ox2 : ox2 + w]


def _draw_shape(out: np.ndarray, shape: Shape, index: int) -> None:
    h, w = out.shape[:2]
    r = shape.size
    cx = r + _bounce(shape.start[0] + index * shape.velocity[0], max(0.0, w - 2 * r))
    cy = r + _bounce(shape.start[1] + index * shape.velocity[1], max(0.0, h - 2 * r))
    if shape.kind == "circle":
        centre = (round(cx * SUBPIXEL), round(cy * SUBPIXEL))
        cv2.circle(out, centre, round(r * SUBPIXEL), shape.colour, -1, cv2.LINE_AA, SUBPIXEL_BITS)
        return
    angle = index * shape.spin
    corners = np.array(
        [(math.cos(angle + q * math.pi / 2), math.sin(angle + q * math.pi / 2)) for q in range(4)]
    )
    pts = np.round((corners * r * math.sqrt(2) + (cx, cy)) * SUBPIXEL).astype(np.int32)
    cv2.fillConvexPoly(out, pts, shape.colour, cv2.LINE_AA, SUBPIXEL_BITS)


def _draw_counter(out: np.ndarray, index: int) -> None:
    """Frame number about a sixth of the frame tall, outlined so it stays
    legible on any background and after heavy quantisation."""
    h, w = out.shape[:2]
    text = f"{index:04d}"
    font = cv2.FONT_HERSHEY_SIMPLEX
    (tw, th), _ = cv2.getTextSize(text, font, 1.0, 2)
    scale = min(h / 6 / th, 0.9 * w / tw)
    thickness = max(1, round(scale * 2))
    outline = thickness + max(2, thickness // 2)
    org = (max(1, w // 40), max(1, h // 40) + round(th * scale))
    cv2.putText(out, text, org, font, scale, (0, 0, 0), outline, cv2.LINE_AA)
    cv2.putText(out, text, org, font, scale, (255, 255, 255), thickness, cv2.LINE_AA)


def synth_frame(index: int, width: int, height: int, seed: int = 0) -> np.ndarray:
    """Frame ``index`` of the synthetic clip as (height, width, 3) uint8 RGB.

    Deterministic in (index, width, height, seed).
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"frame size must be positive, got {width}x{height}")
    scene = _scene(width, height, seed)
    out = np.empty((height, width, 3), np.uint8)
    _paste_background(out, scene, index)
    for shape in scene.shapes:
        _draw_shape(out, shape, index)
    _draw_counter(out, index)
    return out
