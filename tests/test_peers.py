"""The measured baselines of ``pipeline bench``: plain PyAV decode, encode, transcode and FFmpeg filters."""

from __future__ import annotations

import av
import pytest

from pipeline.bench import peer_plumbing, peers
from pipeline.bench.ffmpeg_graph import ffmpeg_chain, parse_graph
from pipeline.errors import ConfigError, InputError
from pipeline.filters import Filter, Param, parse_chain
from pipeline.sample import make_clip

FRAMES = 20
W, H = 160, 96


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return make_clip(tmp_path_factory.mktemp("peers") / "clip.mp4", width=W, height=H, frames=FRAMES)


def check(result, frames=FRAMES):
    assert result["frames"] == frames
    assert result["fps"] > 0
    assert result["seconds"] > 0


class Dummy(Filter):  # not registered: a filter FFmpeg has no equivalent for
    name = "dummy"


class FakeUnsharp(Filter):  # stands in for a colleague's unsharp(sigma, amount)
    name = "unsharp"
    params = (Param("sigma", float, 1.0), Param("amount", float, 1.0))


# -- ceilings ---------------------------------------------------------------


def test_decode_fps(clip):
    check(peers.decode_fps(clip))
    check(peers.decode_fps(clip, frames=5), 5)


def test_load_then_encode(clip):
    frames = peers.load_frames(clip)
    assert len(frames) == FRAMES
    assert {(f.format.name, f.width, f.height) for f in frames} == {("yuv420p", W, H)}
    info = peers.video_info(clip)
    assert (info["width"], info["height"], info["rate"]) == (W, H, 30)
    result = peers.encode_fps(frames, width=W, height=H, rate=info["rate"], options={"preset": "veryfast"})
    check(result)
    assert (result["width"], result["height"]) == (W, H)
    assert result["muxer"] in ("null", "matroska")


def test_transcode_fps(clip):
    check(peers.transcode_fps(clip, options={"preset": "veryfast"}))
    check(peers.transcode_fps(clip, frames=7), 7)


@pytest.mark.parametrize("measure", [
    lambda clip: peers.decode_fps(clip, frames=5),
    lambda clip: peers.load_frames(clip, frames=5),
    lambda clip: peers.transcode_fps(clip, frames=5),
    lambda clip: peers.ffmpeg_filters_fps(clip, "gblur=sigma=1", frames=5),
], ids=["decode", "load", "transcode", "ffmpeg_filters"])
def test_peers_drain_their_decoder_before_it_goes(clip, monkeypatch, measure):
    """Stopped part-way, a decoder's frame threads still decode; PyAV frees the decoder holding the GIL and
    joins them, so one that logs meanwhile would hang the bench: each peer drains its decoder first."""
    drained = []

    def drain(stream):
        frame_threads = bool(stream.thread_type & av.codec.context.ThreadType.FRAME)
        drained.append((frame_threads, stream.codec_context.is_open))
        real_drain(stream)

    real_drain = peer_plumbing.drain_decoder
    monkeypatch.setattr(peer_plumbing, "drain_decoder", drain)
    measure(clip)
    assert drained == [(True, True)]


def test_null_muxer_is_used():
    # The cheapest throw-away output; the matroska fallback is for builds without it.
    with peer_plumbing._Encoder("libx264", None, rate=30, time_base=None) as enc:
        assert enc.muxer == "null"


def test_bad_input(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        peers.decode_fps(tmp_path / "missing.mp4")
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video at all" * 10)
    with pytest.raises(InputError):
        peers.transcode_fps(junk)
    with pytest.raises(ConfigError, match="frames must be positive"):
        peers.decode_fps(junk, frames=0)


def test_bad_encoder(clip):
    with pytest.raises(ConfigError, match="nosuchcodec"):
        peers.transcode_fps(clip, codec="nosuchcodec")


# -- FFmpeg filter peer -----------------------------------------------------


def test_chain_gblur_eq():
    chain = parse_chain("gblur=sigma=2,eq=contrast=1.2")
    with_eq = ffmpeg_chain(chain, available={"gblur", "eq", "lutyuv"})
    assert with_eq == "gblur=sigma=2,eq=contrast=1.2:brightness=0:saturation=1:gamma=1"
    # PyAV's wheels lack FFmpeg's GPL filters (eq): the same lookup tables through lutyuv.
    without_eq = ffmpeg_chain(chain, available={"gblur", "lutyuv"})
    assert without_eq.startswith("gblur=sigma=2,lutyuv=y=(val-127.5)*1.2+127.5")
    assert ffmpeg_chain(chain, available={"gblur"}) is None


def test_chain_unsharp_mask_size():
    def size(sigma):
        desc = ffmpeg_chain([FakeUnsharp(sigma=sigma, amount=1.5)], available={"unsharp"})
        assert desc.endswith(":luma_amount=1.5")
        return desc

    assert size(1.0) == "unsharp=luma_msize_x=7:luma_msize_y=7:luma_amount=1.5"
    assert size(0.2).startswith("unsharp=luma_msize_x=3:luma_msize_y=3")
    assert size(10).startswith("unsharp=luma_msize_x=13:luma_msize_y=13")  # FFmpeg's largest square mask


def test_chain_without_equivalent():
    assert ffmpeg_chain([Dummy()]) is None
    assert ffmpeg_chain(parse_chain("gblur=sigma=2") + [Dummy()]) is None
    assert ffmpeg_chain([]) == "null"


def test_parse_graph_quoting():
    assert parse_graph("lutyuv=y='clip(val,16,235)', hflip") == [
        ("lutyuv", "y=clip(val,16,235)"),
        ("hflip", None),
    ]
    assert parse_graph(r"lutyuv=y=clip(val\,16\,235)") == [("lutyuv", "y=clip(val,16,235)")]


def test_ffmpeg_filters_fps(clip):
    desc = ffmpeg_chain(parse_chain("gblur=sigma=2,eq=contrast=1.2"))
    result = peers.ffmpeg_filters_fps(clip, desc)
    check(result)
    assert result["graph"].startswith("gblur=sigma=2,")
    assert (result["width"], result["height"]) == (W, H)


def test_ffmpeg_filters_resize_and_fallbacks_run(clip):
    # Every fallback this build would use must be accepted by FFmpeg; the encoder follows the new size.
    chain = parse_chain("eq=contrast=-1.5:brightness=0.1:saturation=2:gamma=2.2")
    unsharp = ffmpeg_chain([FakeUnsharp(sigma=5, amount=9)])  # mask and amount clamped to FFmpeg's limits
    desc = ",".join([ffmpeg_chain(chain), unsharp, "crop=100:60:0:0"])
    result = peers.ffmpeg_filters_fps(clip, desc, frames=4, threads=1)
    check(result, 4)
    assert (result["width"], result["height"]) == (100, 60)
    if hasattr(av.filter.Graph(), "threads"):
        assert result["filter_threads"] == 1


@pytest.mark.parametrize(
    "desc, message",
    [
        ("gblur=sigma=2,[x]", "only a linear chain"),
        ("gblur=sigma=2,,eq", "empty filter"),
        ("lutyuv=y='val", "unterminated quote"),
        ("nosuchfilter=1", "no filter 'nosuchfilter'"),
        ("gblur=nosuchoption=1", "gblur"),
        ("unsharp=luma_msize_x=23:luma_msize_y=23", "unsharp"),
    ],
)
def test_bad_graph(clip, desc, message):
    with pytest.raises(ConfigError, match=message) as info:
        peers.ffmpeg_filters_fps(clip, desc)
    assert "\n" not in str(info.value)


def test_graph_fails_on_configure(clip):
    # Only the input's size shows that the crop does not fit: raised from the decode thread.
    with pytest.raises(ConfigError, match="crop"):
        peers.ffmpeg_filters_fps(clip, "crop=1000:1000")


def fake(name, **values):
    """An unregistered filter with these attributes, as a colleague's filter of that name would have."""
    params = tuple(Param(k, type(v), v) for k, v in values.items())
    cls = type(f"Fake_{name}", (Filter,), {"name": name, "params": params})
    return cls()


def test_every_translation_runs_in_ffmpeg(clip, tmp_path):
    cube = tmp_path / "id.cube"
    cube.write_text("LUT_3D_SIZE 2\n" + "".join(f"{r} {g} {b}\n" for b in (0, 1) for g in (0, 1) for r in (0, 1)))
    chain = [
        fake("boxblur", radius=3),
        fake("bilateral", sigma_s=2.0, sigma_r=0.1),
        fake("sobel", scale=1.0),
        fake("vignette", angle=0.6),
        fake("lut3d", file=str(cube)),
        fake("hflip"),
        fake("vflip"),
        fake("invert"),
        fake("grayscale"),
        fake("hue", degrees=30.0),
        fake("scale", w=120, h=-1),
        fake("crop", w=100, h=60, x=4, y=-1),
        fake("transpose", dir="cclock"),
    ]
    desc = ffmpeg_chain(chain)
    assert desc is not None
    assert desc.endswith(
        "hflip,vflip,negate,format=gray,format=yuv420p,hue=h=30,scale=120:-2,"
        "crop=w=100:h=60:x=4:y=(ih-oh)/2,transpose=cclock"
    )
    result = peers.ffmpeg_filters_fps(clip, desc, frames=2)
    check(result, 2)
    assert (result["width"], result["height"]) == (60, 100)  # transposed
    assert ffmpeg_chain([fake("crop", w=-1, h=-1, x=-1, y=-1)]) == "crop=w=iw:h=ih:x=(iw-ow)/2:y=(ih-oh)/2"
    assert ffmpeg_chain([fake("boxblur", radius=3)], available={"boxblur"}).startswith("boxblur=luma_radius=3:")
    assert ffmpeg_chain([fake("boxblur", radius=3)], available={"avgblur"}) == "avgblur=sizeX=3:sizeY=3"
    assert ffmpeg_chain([fake("scale", size=2)]) is None  # missing the attributes it needs
    assert ffmpeg_chain([fake("tdenoise", alpha=0.3)]) is None  # temporal: no FFmpeg equivalent here
