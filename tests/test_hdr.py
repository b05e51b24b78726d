"""HDR and 10-bit end to end on the CPU: 10 bits kept from decoder to encoder, BT.2020 maths checked against
the formulas in float64, HDR metadata carried through the encoders' params, --pix-fmt, RGB input's tags.
"""

from __future__ import annotations

import struct
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from av.sidedata.sidedata import Type

import pipeline
from utils import first_frame, hdr_of, max_abs_diff, planes10, run_cli
from pipeline.hdr import HdrMetadata, MasteringDisplay, merge_params, parse_mastering
from pipeline.sample import make_clip, synth_frame
from pipeline.video import VideoFormat

W, H, FRAMES = 160, 96, 4
# The HDR10 grade make_clip writes (pipeline.sample.HDR10_PARAMS): P3 primaries, D65, 0.0001-1000 cd/m2.
RED, GREEN, BLUE, WHITE = ((Fraction(x), Fraction(y)) for x, y in (("0.68", "0.32"), ("0.265", "0.69"),
                                                                    ("0.15", "0.06"), ("0.3127", "0.329")))


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("hdr")


@pytest.fixture(scope="module")
def hdr_clip(clips) -> Path:
    """10-bit HEVC, BT.2020 non-constant luminance, PQ, with mastering display and content light level."""
    return make_clip(clips / "hdr10.mkv", width=W, height=H, frames=FRAMES, codec="libx265", pix_fmt="yuv420p10le",
                     hdr=True, audio=False, seed=5)


def run(clip: Path, out: Path, *args: str, device: str = "cpu") -> str:
    proc = run_cli("run", clip, "-o", out, "-q", "-y", "--device", device, *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


# --- the BT.2020 formulas, float64, from the decoded planes (independent of the pipeline's code) -------

BT2020 = (0.2627, 0.0593)  # Kr, Kb (ITU-R BT.2020, non-constant luminance)
BT601 = (0.299, 0.114)


def to_rgb_f64(y, u, v, k=BT2020, depth: int = 10) -> np.ndarray:
    """Limited-range code values of ``depth`` bits -> R'G'B' in [0, 1]; chroma repeated over 2x2."""
    kr, kb = k
    kg = 1 - kr - kb
    s = 2.0 ** (depth - 8)
    yp = (y.astype(np.float64) - 16 * s) / (219 * s)
    cb = ((u.astype(np.float64) - 128 * s) / (224 * s)).repeat(2, 0).repeat(2, 1)
    cr = ((v.astype(np.float64) - 128 * s) / (224 * s)).repeat(2, 0).repeat(2, 1)
    r = yp + 2 * (1 - kr) * cr
    b = yp + 2 * (1 - kb) * cb
    g = (yp - kr * r - kb * b) / kg
    return np.clip(np.stack([r, g, b]), 0, 1)


def to_yuv_f64(rgb: np.ndarray, k=BT2020, depth: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """R'G'B' -> limited-range code values (Y = 64 + 876 Y', C = 512 + 896 C' at 10 bits); chroma of 2x2 means."""
    kr, kb = k
    kg = 1 - kr - kb
    s = 2.0 ** (depth - 8)
    r, g, b = rgb
    luma = kr * r + kg * g + kb * b
    m = [(c[0::2, 0::2] + c[0::2, 1::2] + c[1::2, 0::2] + c[1::2, 1::2]) / 4 for c in rgb]
    lm = kr * m[0] + kg * m[1] + kb * m[2]
    code = lambda x: np.clip(np.floor(x + 0.5), 0, 2 ** depth - 1)  # noqa: E731
    return (code(16 * s + 219 * s * luma), code(128 * s + 224 * s * (m[2] - lm) / (2 - 2 * kb)),
            code(128 * s + 224 * s * (m[0] - lm) / (2 - 2 * kr)))


def eq_f64(rgb: np.ndarray, contrast: float, saturation: float, k=BT2020) -> np.ndarray:
    kr, kb = k
    c = (rgb - 0.5) * contrast + 0.5
    lum = kr * c[0] + (1 - kr - kb) * c[1] + kb * c[2]
    return np.clip(lum + (c - lum) * saturation, 0, 1)


def worst(got, expected) -> int:
    """The largest difference over planes, in code values."""
    return max(max_abs_diff(a, b) for a, b in zip(got, expected))


@pytest.mark.parametrize("chain, apply", [
    ("", lambda rgb, k: rgb),
    ("eq=contrast=1.15:saturation=0.6", lambda rgb, k: eq_f64(rgb, 1.15, 0.6, k)),
    ("grayscale", lambda rgb, k: eq_f64(rgb, 1.0, 0.0, k)),
], ids=["none", "eq", "grayscale"])
def test_10bit_bt2020_colours_match_the_formulas(hdr_clip, tmp_path, chain, apply):
    """The output, 10-bit lossless, is what BT.2020 maths gives from the input's decoded planes (to 1 code of
    10 bits: float32 against float64 at a rounding boundary); BT.601 maths would be far off."""
    out = tmp_path / "out.mkv"
    run(hdr_clip, out, "-c", "ffv1", "-vf", chain)
    got, source = planes10(out), planes10(hdr_clip)
    assert len(got) == len(source) == FRAMES
    for planes_in, planes_out in zip(source, got):
        expected = to_yuv_f64(apply(to_rgb_f64(*planes_in), BT2020))
        assert worst(planes_out, expected) <= 1
        if chain:
            wrong = to_yuv_f64(apply(to_rgb_f64(*planes_in, BT601), BT601), BT601)
            assert worst(planes_out, wrong) > 4
    if chain == "grayscale":  # Y' kept (where nothing clipped), chroma neutral
        assert all((u == 512).all() and (v == 512).all() for _, u, v in got)
    f = first_frame(out)
    assert (f.colorspace, f.color_primaries, f.color_trc, f.color_range) == (9, 9, 16, 1)


def test_the_mastering_display_layout_from_the_bytes_pyav_gives(hdr_clip):
    """AVMasteringDisplayMetadata: primaries R, G, B (x, y), white point, min and max luminance, as
    (num, den) int32 pairs, then has_primaries and has_luminance; AVContentLightMetadata: MaxCLL, MaxFALL."""
    f = first_frame(hdr_clip)
    raw = bytes(f.side_data.get(Type.MASTERING_DISPLAY_METADATA))
    assert len(raw) == 88 and struct.unpack("<2i", raw[80:]) == (1, 1)
    m = parse_mastering(raw)
    assert m.red == RED and m.green == GREEN and m.blue == BLUE and m.white == WHITE
    assert (m.min_luminance, m.max_luminance) == (Fraction(1, 10000), 1000)
    hdr = hdr_of(hdr_clip)
    assert (hdr.max_cll, hdr.max_fall) == (1000, 400)


@pytest.mark.parametrize("codec, suffix", [("libx265", ".mkv"), ("libx264", ".mp4"), ("libsvtav1", ".mkv")])
def test_hdr_metadata_goes_through_the_encoders_params(hdr_clip, tmp_path, codec, suffix):
    out = tmp_path / f"out{suffix}"
    run(hdr_clip, out, "-c", codec, "-vf", "")
    got, sent = hdr_of(out), hdr_of(hdr_clip)
    assert (got.max_cll, got.max_fall) == (sent.max_cll, sent.max_fall)
    a, b = got.mastering, sent.mastering
    for x, y in zip((a.red, a.green, a.blue, a.white), (b.red, b.green, b.blue, b.white)):
        assert abs(float(x[0] - y[0])) < 1e-4 and abs(float(x[1] - y[1])) < 1e-4  # SVT-AV1 keeps 1/65536 steps
    assert abs(float(a.max_luminance - b.max_luminance)) < 0.01 and abs(float(a.min_luminance - b.min_luminance)) < 1e-4
    f = first_frame(out)
    assert f.format.name == "yuv420p10le" and (f.colorspace, f.color_primaries, f.color_trc) == (9, 9, 16)


def test_the_users_own_params_win(hdr_clip, tmp_path):
    out = tmp_path / "out.mkv"
    run(hdr_clip, out, "-c", "libx265", "-vf", "", "--encoder-opt", "x265-params=max-cll=500,100:aq-mode=1")
    got = hdr_of(out)
    assert (got.max_cll, got.max_fall) == (500, 100)
    assert got.mastering.red == RED  # what the user did not set is the input's


def test_an_encoder_without_10_bits_or_hdr_converts_and_says_so(hdr_clip, tmp_path):
    out = tmp_path / "out.webm"
    said = run(hdr_clip, out, "-c", "libvpx-vp9", "-vf", "", "--encoder-opt", "deadline=realtime")
    assert "converting 10-bit to 8 bits for libvpx-vp9" in said
    assert "cannot carry the input's HDR metadata" in said
    f = first_frame(out)
    assert f.format.name == "yuv420p" and (f.colorspace, f.color_trc) == (9, 16)
    assert hdr_of(out) is None


def test_pix_fmt_chooses_the_depth(hdr_clip, tmp_path):
    out = tmp_path / "out.mkv"
    said = run(hdr_clip, out, "-c", "ffv1", "-vf", "", "--pix-fmt", "yuv420p")
    assert "converting" not in said  # asked for: no notice
    f = first_frame(out)
    assert f.format.name == "yuv420p" and (f.colorspace, f.color_trc) == (9, 16)
    # 8 bits of the same picture, by the BT.2020 formulas
    got = VideoFormat(W, H).planes(f.to_ndarray().ravel())
    assert worst(got, to_yuv_f64(to_rgb_f64(*planes10(hdr_clip)[0]), BT2020, 8)) <= 1
    run(hdr_clip, tmp_path / "default.mp4", "-vf", "")  # libx264 takes 10 bits: High 10
    with av.open(str(tmp_path / "default.mp4")) as c:
        assert c.streams.video[0].codec_context.profile == "High 10"


def test_an_8bit_input_stays_8bit_unless_asked(tmp_path):
    clip = make_clip(tmp_path / "in.mp4", width=W, height=H, frames=2, audio=False)
    run(clip, tmp_path / "a.mkv", "-c", "ffv1", "-vf", "")
    assert first_frame(tmp_path / "a.mkv").format.name == "yuv420p"
    run(clip, tmp_path / "b.mkv", "-c", "ffv1", "-vf", "", "-pix_fmt", "yuv420p10le")
    y10 = planes10(tmp_path / "b.mkv")[0][0].astype(np.int64)
    y8 = first_frame(tmp_path / "a.mkv").to_ndarray()[:H].astype(np.int64)
    assert np.abs(y10 - 4 * y8).max() <= 3  # 64 + 876 Y' against 4 (16 + 219 Y')


@pytest.mark.parametrize("args, message", [
    (("--pix-fmt", "yuv420p11"), "unknown pixel format"),
    (("-c", "mpeg4", "--pix-fmt", "yuv420p10le"), "does not take it"),
])
def test_a_pix_fmt_nobody_takes_is_refused(hdr_clip, tmp_path, args, message):
    out = tmp_path / "out.mkv"
    proc = run_cli("run", hdr_clip, "-o", out, "-q", "--device", "cpu", *args)
    assert proc.returncode == 2 and message in proc.stderr and not out.exists()
    assert len(proc.stderr.strip().splitlines()) == 1


def test_api_option_and_statistics(hdr_clip, tmp_path):
    stats = pipeline.run(hdr_clip, tmp_path / "out.mkv", filters="", device="cpu", pix_fmt="yuv420p", codec="ffv1")
    assert stats["layouts"] == {"input": "i420p10", "output": "i420"} and stats["pix_fmt"] == "yuv420p"
    stats = pipeline.run(hdr_clip, "null", filters="grayscale", device="cpu")
    assert stats["layouts"] == {"input": "i420p10", "output": "i420p10"} and stats["pix_fmt"] is None
    with pipeline.frames(hdr_clip, filters="", device="cpu", frames=1) as frames:
        (frame,) = [f.copy() for f in frames]
    assert frame.array.dtype == np.uint8 and frame.array.shape == (H, W, 3)  # frames in Python stay RGB24


def test_12bit_input_is_kept_to_10_bits(tmp_path):
    clip = make_clip(tmp_path / "in.mkv", width=W, height=H, frames=2, codec="ffv1", pix_fmt="yuv420p12le",
                     audio=False)
    out = tmp_path / "out.mkv"
    said = run(clip, out, "-c", "ffv1", "-vf", "")
    assert "yuv420p12le is kept to 10 bits" in said
    with av.open(str(clip)) as c:
        frame = next(c.decode(video=0))
    assert frame.colorspace == 6  # SD: BT.601
    p12 = [np.frombuffer(p, np.uint16).reshape(-1, p.line_size // 2)[:h, :w]
           for p, (w, h) in zip(frame.planes, [(W, H), (W // 2, H // 2), (W // 2, H // 2)])]
    # swscale takes 12 bits to 10 (rounding, maybe dithering), then the round trip through RGB: 2 codes
    assert worst(planes10(out)[0], to_yuv_f64(to_rgb_f64(*p12, BT601, 12), BT601, 10)) <= 2


def test_nvdec_takes_up_to_10_bits_and_refuses_deeper_input_before_decoding(hdr_clip, tmp_path):
    """Streams deeper than P010 never reach NVDEC (see ingest.refuse_deep_surfaces): refused from the stream's
    header, before a packet is read; 8-bit, 10-bit and RGB streams pass."""
    from pipeline.errors import DecoderRefused
    from pipeline.ingest import refuse_deep_surfaces

    deep = make_clip(tmp_path / "in12.mkv", width=W, height=H, frames=1, codec="ffv1", pix_fmt="yuv420p12le",
                     audio=False)
    with av.open(str(deep)) as c:
        with pytest.raises(DecoderRefused, match=r"12-bit input \(yuv420p12le\), 10 bits at most.*--decode cpu"):
            refuse_deep_surfaces("in12.mkv", c.streams.video[0])
    for clip in (hdr_clip, Path("samples/sample.mp4")):
        with av.open(str(clip)) as c:
            refuse_deep_surfaces(clip.name, c.streams.video[0])


def test_the_depth_refusal_reads_the_stream_format_under_the_hardware_decoder():
    """With NVDEC attached PyAV gives the codec context's format as "cuda" (no components: it would pass as
    RGB-like); its pix_fmt still names the stream's own format, which decides."""
    from types import SimpleNamespace

    from pipeline.errors import DecoderRefused
    from pipeline.ingest import header_format, refuse_deep_surfaces

    def stream(pix_fmt):
        return SimpleNamespace(codec_context=SimpleNamespace(format=av.VideoFormat("cuda"), pix_fmt=pix_fmt))

    assert header_format(stream("yuv420p12le")).name == "yuv420p12le"
    assert header_format(stream(None)) is None and header_format(stream("cuda")) is None
    with pytest.raises(DecoderRefused, match=r"12-bit input \(yuv420p12le\), 10 bits at most"):
        refuse_deep_surfaces("in12.mkv", stream("yuv420p12le"))
    refuse_deep_surfaces("in10.mkv", stream("yuv420p10le"))
    refuse_deep_surfaces("in.mkv", stream(None))


def test_bt2020_constant_luminance_is_read_as_non_constant_with_a_notice(tmp_path):
    clip = tmp_path / "cl.mkv"
    with av.open(str(clip), "w") as o:
        s = o.add_stream("ffv1", rate=25)
        s.width, s.height, s.pix_fmt = 64, 32, "yuv420p10le"
        s.codec_context.colorspace, s.codec_context.color_primaries, s.codec_context.color_trc = 10, 9, 14
        for i in range(2):
            samples = np.full((48, 64), 512, np.uint16)
            samples[:32] = 300 + i  # grey: neutral chroma
            f = av.VideoFrame.from_ndarray(samples, format="yuv420p10le")
            f.pts, f.colorspace = i, 10
            o.mux(s.encode(f))
        o.mux(s.encode(None))
    out = tmp_path / "out.mkv"
    said = run(clip, out, "-c", "ffv1", "-vf", "")
    assert "constant luminance is processed as non-constant luminance" in said
    f = first_frame(out)
    assert f.colorspace == 10 and f.color_trc == 14  # the input's tags, kept
    assert (f.to_ndarray()[:32] == 300).all()


@pytest.mark.gpu
@pytest.mark.parametrize("chain, exact", [
    ("eq=contrast=1.1:saturation=0.8", True),
    ("grayscale,hue=degrees=30", True),
    ("grayscale,vignette", False),
    ("sobel,eq=gamma=1.3", False),
    ("gblur=sigma=1.5,eq=contrast=1.1:saturation=1.1", False),
], ids=["eq", "grayscale", "vignette", "sobel", "default"])
def test_10bit_on_cuda_gives_the_cpu_backends_frames(hdr_clip, tmp_path, chain, exact):
    """10-bit BT.2020 through the CUDA kernels (i420p10 in and out, the luma filters on BT.2020 weights, the
    pointwise ends folded into the conversions): the CPU backend's bits (to 1 code where a filter uses
    sqrtf, cosf, powf or a blur, whose last bits CUDA and NumPy round differently)."""
    for device in ("cpu", "cuda"):
        run(hdr_clip, tmp_path / f"{device}.mkv", "-c", "ffv1", "-vf", chain, device=device)
    cpu, gpu = planes10(tmp_path / "cpu.mkv"), planes10(tmp_path / "cuda.mkv")
    assert len(cpu) == len(gpu) == FRAMES
    for a, b in zip(cpu, gpu):
        assert worst(a, b) <= (0 if exact else 1)


@pytest.mark.gpu
def test_rgb_input_on_cuda_gives_the_cpu_backends_frames(tmp_path):
    clip = png_clip(tmp_path / "in.mov", 320, 180)
    for device in ("cpu", "cuda"):
        run(clip, tmp_path / f"{device}.mkv", "-c", "ffv1", "-vf", "grayscale,hue=degrees=20", device=device)
    a, b = (first_frame(tmp_path / f"{d}.mkv").to_ndarray() for d in ("cpu", "cuda"))
    np.testing.assert_array_equal(a, b)


# --- RGB and grey input: the YUV output is tagged with the matrix it was converted with -------------------


def png_clip(path: Path, width: int, height: int, pix_fmt: str = "rgb24") -> Path:
    with av.open(str(path), "w") as o:
        s = o.add_stream("png", rate=25)
        s.width, s.height, s.pix_fmt = width, height, pix_fmt
        for i in range(2):
            f = av.VideoFrame.from_ndarray(synth_frame(i, width, height, 3), format="rgb24")
            f = f.reformat(format=pix_fmt) if pix_fmt != "rgb24" else f
            f.pts = i
            o.mux(s.encode(f))
        o.mux(s.encode(None))
    return path


@pytest.mark.parametrize("width, height, colorspace, name", [(320, 180, 6, "BT.601"), (1280, 720, 1, "BT.709")])
def test_rgb_input_is_written_as_tagged_yuv(tmp_path, width, height, colorspace, name):
    clip = png_clip(tmp_path / "in.mov", width, height)
    out = tmp_path / "out.mkv"
    said = run(clip, out, "-c", "ffv1", "-vf", "")
    assert f"rgb24 input leaves the filters as YUV 4:2:0, converted with {name} limited range and tagged so" in said
    f = first_frame(out)
    assert f.format.name == "yuv420p" and (f.colorspace, f.color_range) == (colorspace, 1)
    # Read back with the matrix it is tagged with, the picture is the input's (chroma is 4:2:0 now).
    matrix = {6: "smpte170m", 1: "itu709"}[colorspace]
    back = f.reformat(format="rgb24", src_colorspace=matrix, src_color_range=1).to_ndarray().astype(np.int64)
    rgb = synth_frame(0, width, height, 3).astype(np.int64)
    luma = lambda a: a @ np.array([0.299, 0.587, 0.114] if colorspace == 6 else [0.2126, 0.7152, 0.0722])  # noqa: E731
    assert np.abs(luma(back) - luma(rgb)).mean() < 1.5


def test_grey_input_keeps_its_levels(tmp_path):
    clip = png_clip(tmp_path / "in.mov", 320, 180, "gray")
    out = tmp_path / "out.mkv"
    said = run(clip, out, "-c", "ffv1", "-vf", "")
    assert "gray input leaves the filters as YUV 4:2:0" in said
    with av.open(str(clip)) as c:
        grey = next(c.decode(video=0)).to_ndarray().astype(np.float64)
    yuv = first_frame(out).to_ndarray().astype(np.int64)
    assert np.abs(yuv[:180] - np.floor(16 + 219 * grey / 255 + 0.5)).max() <= 1
    assert (np.abs(yuv[180:] - 128) <= 1).all()


# --- the metadata itself -------------------------------------------------------------------------------


def mastering_bytes(has_primaries: int = 1, has_luminance: int = 1, den: int = 50000) -> bytes:
    values = [34000, den, 16000, den, 13250, den, 34500, den, 7500, den, 3000, den, 15635, den, 16450, den,
              1, 10000, 10000000, 10000]
    return struct.pack("<20i2i", *values, has_primaries, has_luminance)


def test_encoder_params_spell_the_metadata_as_each_encoder_takes_it():
    hdr = HdrMetadata.parse(mastering_bytes(), struct.pack("<2I", 1000, 400))
    display = "G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)L(10000000,1)"
    assert hdr.encoder_params("libx265") == ("x265-params", {"master-display": display, "max-cll": "1000,400"})
    assert hdr.encoder_params("libx264") == ("x264-params", {"mastering-display": display, "cll": "1000,400"})
    assert hdr.encoder_params("libsvtav1") == ("svtav1-params", {
        "mastering-display": "G(0.265,0.69)B(0.15,0.06)R(0.68,0.32)WP(0.3127,0.329)L(1000,0.0001)",
        "content-light": "1000,400"})
    assert hdr.encoder_params("ffv1") is None


def test_incomplete_metadata():
    assert parse_mastering(mastering_bytes(has_luminance=0)) is None
    assert parse_mastering(mastering_bytes(den=0)) is None
    assert parse_mastering(b"\0" * 10) is None
    assert HdrMetadata.parse(None, None) is None
    light_only = HdrMetadata.parse(mastering_bytes(has_primaries=0), struct.pack("<2I", 600, 200))
    assert light_only.mastering is None and light_only.encoder_params("libx265") == (
        "x265-params", {"max-cll": "600,200"})
    assert isinstance(HdrMetadata.parse(mastering_bytes(), None).mastering, MasteringDisplay)


def test_merge_params():
    assert merge_params(None, {"a": "1"}) == "a=1"
    assert merge_params("log-level=error:a=5", {"a": "1", "b": "2"}) == "log-level=error:a=5:b=2"


def test_pix_fmt_in_a_config_file(tmp_path):
    from pipeline.config_file import load_toml

    path = tmp_path / "c.toml"
    path.write_text('pix-fmt = "yuv420p10le"\n')
    assert load_toml(path) == {"pix_fmt": "yuv420p10le"}
    path.write_text("pix_fmt = 10\n")
    with pytest.raises(pipeline.ConfigError, match="pix_fmt"):
        load_toml(path)


def test_the_preview_shows_a_10bit_frame_in_8_bits():
    from pipeline.preview import eight_bit_i420

    fmt = VideoFormat(4, 2, depth=10)
    samples = np.arange(fmt.nbytes, dtype=np.uint16) * 80
    shown = eight_bit_i420(samples.view(np.uint8), fmt)
    assert shown.dtype == np.uint8 and shown.shape == fmt.shape
    np.testing.assert_array_equal(shown.ravel(), samples >> 2)
