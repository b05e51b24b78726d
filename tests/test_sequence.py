"""Image-sequence outputs (``-o f%03d.png``): the frames FFmpeg's image2 muxer would write, placed only once
the run has completed; none left by a failed run; existing frames kept without -y."""

from __future__ import annotations

import os
from pathlib import Path

import av
import numpy as np
import pytest

from pipeline import sample as make_sample
from pipeline.config import DEFAULT_CODEC
from pipeline.errors import ConfigError
from pipeline.sequence import StagedSequence, encoder_for, existing_frames, is_sequence
from utils import one_error, run_pipeline, video_frames

FRAMES = 6


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return make_sample.make_clip(tmp_path_factory.mktemp("seq") / "clip.mp4", width=96, height=64, frames=FRAMES,
                                 fps=30, seed=11, audio=True)


def rgb_frames(paths) -> list[np.ndarray]:
    frames = []
    for p in paths:
        with av.open(str(p)) as c:
            frames.append(next(c.decode(video=0)).to_ndarray(format="rgb24"))
    return frames


def hidden(directory: Path) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith(".")]


def test_a_png_sequence_has_every_frame_as_the_video_output_has_it(clip, tmp_path):
    result = run_pipeline(clip, "-o", tmp_path / "f%03d.png", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    names = existing_frames(tmp_path / "f%03d.png")
    assert names == [f"f{i:03d}.png" for i in range(1, FRAMES + 1)] and not hidden(tmp_path)
    assert run_pipeline(clip, "-o", tmp_path / "ref.mkv", "-c", "ffv1", cwd=tmp_path).returncode == 0
    reference = [f.to_ndarray(format="rgb24") for f in video_frames(tmp_path / "ref.mkv")]
    pictures = rgb_frames(tmp_path / n for n in names)
    assert len(pictures) == len(reference) == FRAMES
    assert all(p.shape == (64, 96, 3) and p.std() > 5 for p in pictures)  # textured, not blank
    worst = max(int(np.abs(p.astype(int) - r).max()) for p, r in zip(pictures, reference))
    assert worst <= 3  # the same frames; only the YUV -> RGB conversion's rounding may differ


def test_existing_frames_are_kept_without_y_and_replaced_with_it(clip, tmp_path):
    old = tmp_path / "f002.jpg"
    old.write_bytes(b"not a picture")
    one_error(run_pipeline(clip, "-o", tmp_path / "f%03d.jpg", cwd=tmp_path), 2, "already exist", "-y")
    assert old.read_bytes() == b"not a picture" and existing_frames(tmp_path / "f%03d.jpg") == ["f002.jpg"]
    result = run_pipeline(clip, "-o", tmp_path / "f%03d.jpg", "-y", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(existing_frames(tmp_path / "f%03d.jpg")) == FRAMES and old.read_bytes()[:2] == b"\xff\xd8"


def test_a_failed_run_leaves_no_frame(clip, tmp_path):
    from utils import remux

    src = make_sample.make_clip(tmp_path / "src.mp4", width=160, height=96, frames=30, fps=30, seed=12, audio=True)
    data = remux(src, tmp_path / "whole.mkv").read_bytes()
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(data[: len(data) * 6 // 10])  # --strict: fatal at the cut, after frames were written
    src.unlink()
    one_error(run_pipeline(cut, "-o", tmp_path / "f%03d.png", "--strict", cwd=tmp_path), 3, "--strict")
    assert existing_frames(tmp_path / "f%03d.png") == [] and hidden(tmp_path) == []


def test_a_frame_that_appears_during_the_run_stops_the_placing_of_all(tmp_path):
    target = tmp_path / "f%02d.png"
    staging = StagedSequence(target)
    staging.prepare()
    for i in (1, 2):
        (staging.dir / f"f{i:02d}.png").write_bytes(b"new")
    (tmp_path / "f02.png").write_bytes(b"theirs")
    with pytest.raises(ConfigError, match="appeared during the run"):
        staging.place(False, target)
    assert not staging.dir.exists() and not (tmp_path / "f01.png").exists()
    assert (tmp_path / "f02.png").read_bytes() == b"theirs"


def test_staging_of_a_killed_run_is_removed_and_a_live_ones_kept(tmp_path):
    target = tmp_path / "f%03d.png"
    dead, alive = (tmp_path / f".f_03d.partial-{pid}.png" for pid in (2**22 + 5, os.getppid()))
    for d in (dead, alive):
        d.mkdir()
        (d / "f001.png").write_bytes(b"x")
    StagedSequence(target).prepare()
    assert not dead.exists() and alive.exists()


@pytest.mark.parametrize("name, fmt, sequence", [
    ("f%03d.png", None, True), ("%d.JPG", None, True), ("a%04d.tiff", None, True),
    ("f%03d.raw", "image2", True), ("f%03d.mp4", None, False), ("f.png", None, False),
    ("f%03d_%03d.png", None, False), ("100%%_%03d.png", None, False),
])
def test_what_is_a_sequence(name, fmt, sequence):
    assert is_sequence(Path(name), fmt) is sequence
    assert is_sequence(f"udp://host:1234/{name}", fmt) is False  # a URL is the receiver's


def test_the_encoder_is_the_picture_formats_unless_given():
    assert encoder_for(Path("f%03d.png"), DEFAULT_CODEC) == "png"
    assert encoder_for(Path("f%03d.jpg"), DEFAULT_CODEC) == "mjpeg"
    assert encoder_for(Path("f%03d.png"), "ffv1") == "ffv1"  # the user's own -c
    assert encoder_for(Path("f%03d.png"), "libx264") == "libx264"  # chosen, not the default


def test_progress_counts_the_frames_bytes(clip, tmp_path):
    result = run_pipeline(clip, "-o", tmp_path / "f%03d.png", "-progress", tmp_path / "p.txt", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    sizes = [line.split("=")[1] for line in (tmp_path / "p.txt").read_text().splitlines()
             if line.startswith("total_size=")]
    placed = sum((tmp_path / n).stat().st_size for n in existing_frames(tmp_path / "f%03d.png"))
    assert int(sizes[-1]) == placed > 0


@pytest.mark.parametrize("where, name", [("100%", "f%03d.png"), ("d%d", "f%03d.png"), ("x", "f%03d_50%.png")])
def test_a_percent_outside_the_frame_number_is_a_percent(clip, tmp_path, where, name):
    directory = tmp_path / where
    directory.mkdir()
    result = run_pipeline(clip, "-o", directory / name, "--frames", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(existing_frames(directory / name)) == 2 and not hidden(directory)


def test_one_picture_is_its_formats_and_takes_one_frame(clip, tmp_path):
    """-o thumb.png was refused ("the image2 muxer cannot hold libx264 video"); of several frames the muxer
    refused the second, mid-run."""
    result = run_pipeline(clip, "-o", "thumb.png", "--frames", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "thumb.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    one_error(run_pipeline(clip, "-o", "two.png", cwd=tmp_path), 2, "one picture holds one frame; add --frames 1")
    assert sorted(os.listdir(tmp_path)) == ["thumb.png"]


def test_every_picture_name_of_ffmpegs_gets_its_encoder_and_one_frame(clip, tmp_path):
    """x.pbm was not taken for a picture: every frame went to the image2 muxer, which failed at the second
    (exit 4 after the run); of one frame it wrote a JPEG (the muxer's default) under the name."""
    one_error(run_pipeline(clip, "-o", "x.pbm", cwd=tmp_path), 2, "one picture holds one frame")
    assert os.listdir(tmp_path) == []
    result = run_pipeline(clip, "-o", "x.pbm", "--frames", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "x.pbm").read_bytes()[:2] == b"P4"  # binary PBM
    assert is_sequence(Path("f%03d.pbm")) and is_sequence(Path("f%03d.SGI")) and not is_sequence(Path("f%03d.avif"))


@pytest.mark.parametrize("name, fmt", [("m.pcx", "matroska"), ("m.png", "matroska")])
def test_a_muxer_named_with_f_is_not_overridden_by_a_picture_name(clip, tmp_path, name, fmt):
    result = run_pipeline(clip, "-o", name, "-f", fmt, "-c", "ffv1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with av.open(str(tmp_path / name)) as back:
        assert fmt in back.format.name and len(list(back.decode(video=0))) > 1


def test_a_sample_into_such_a_picture_is_of_its_format(tmp_path):
    from utils import run_cli

    result = run_cli("sample", "-o", tmp_path / "u.pbm", "--frames", "1", "--size", "64x64")
    assert result.returncode == 0 and (tmp_path / "u.pbm").read_bytes()[:2] == b"P4", result.stderr


def test_an_input_of_one_frame_makes_one_picture_without_frames_1(tmp_path):
    """ffmpeg -i one_frame.mp4 x.png writes it; it was refused, asking for --frames 1."""
    one = make_sample.make_clip(tmp_path / "one.mp4", width=96, height=64, frames=1, fps=30, seed=11, audio=True)
    result = run_pipeline(one, "-o", "x.png", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with av.open(str(tmp_path / "x.png")) as back:
        assert back.streams.video[0].codec_context.name == "png" and len(list(back.decode(video=0))) == 1


@pytest.mark.parametrize("span", [{"duration": 0.4}, {"start": 1.0}, {"end": 0.4}])
def test_a_span_estimated_at_one_frame_still_asks_for_frames_1(tmp_path, span):
    """A span's count is an estimate from the average rate (-t 0.4 of 40 frames in 0.4 s and one at 20 s,
    2 fps on average, is "1 frame"): taken as the input's own, the muxer failed at the second, mid-run."""
    from pipeline.build import check_one_picture
    from pipeline.config import RunConfig

    target = tmp_path / "x.png"
    check_one_picture(RunConfig(input="in.mp4", codec="png"), target, 1)  # the input's own count: one picture
    with pytest.raises(ConfigError, match="one picture holds one frame"):
        check_one_picture(RunConfig(input="in.mp4", codec="png", **span), target, 1)


def test_a_chosen_libx264_into_pictures_is_refused_as_any_video_encoder(clip, tmp_path):
    """Only the default gives way to the picture format: -c libx264 was silently replaced by png, while
    -c libx265 was refused; a config file's or preset's libx264 is as chosen as -c's."""
    for args in (["-c", "libx264"], ["-c", "libx265"]):
        one_error(run_pipeline(clip, "-o", "f%03d.png", *args, cwd=tmp_path), 2, "image2 muxer cannot hold")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name, args, muxer", [("x.webp", ["-c", "png"], "webp"),
                                               ("x.png", ["-c", "libx264"], "image2")])
def test_one_picture_of_a_codec_its_muxer_refuses_says_so_first(clip, tmp_path, name, args, muxer):
    """Asked for --frames 1 first, the user who added it was then told the muxer cannot hold the codec."""
    one_error(run_pipeline(clip, "-o", name, *args, cwd=tmp_path), 2, f"the {muxer} muxer cannot hold")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["e%d%d.png", "dir%04d/f.png", "a%%d.png"])
def test_a_percent_in_one_pictures_path_is_refused_before_the_run(clip, tmp_path, name):
    """The image2 muxer expands it (e%d%d.png became .e11.partial-PID.png, dir%04d/f.png went into dir0001/):
    the picture could not be put in place, and its temporary file stayed."""
    for directory in ("dir%04d", "dir0001"):
        (tmp_path / directory).mkdir()
    one_error(run_pipeline(clip, "-o", name, "--frames", "1", cwd=tmp_path), 2, "holds '%' only as one frame-number")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["dir%04d", "dir0001"]


def test_a_frame_name_that_is_not_a_regular_file_is_refused_before_the_run(clip, tmp_path):
    os.mkfifo(tmp_path / "f003.png")
    (tmp_path / "f001.png").write_bytes(b"mine")
    one_error(run_pipeline(clip, "-o", tmp_path / "f%03d.png", "-y", cwd=tmp_path), 4, "FIFO")
    assert (tmp_path / "f001.png").read_bytes() == b"mine" and not hidden(tmp_path)


def test_staging_is_removed_when_the_muxer_cannot_open(clip, tmp_path):
    one_error(run_pipeline(clip, "-o", tmp_path / "f%03d.png", "--format", "nosuchformat", cwd=tmp_path), 2)
    assert os.listdir(tmp_path) == []


def test_another_extension_with_format_image2_is_checked_before_the_run(clip, tmp_path):
    (tmp_path / "f001.raw").write_bytes(b"mine")
    one_error(run_pipeline(clip, "-o", tmp_path / "f%03d.raw", "--format", "image2", "-c", "png", cwd=tmp_path),
              2, "already exist")
    assert (tmp_path / "f001.raw").read_bytes() == b"mine"


def test_a_pattern_too_long_for_its_staging_directory_still_writes(clip, tmp_path):
    from pipeline.outfile import name_max

    name = "f" * (name_max(tmp_path) - 12) + "%03d.png"  # its frames fit; ".<name>.partial-PID.png" would not
    result = run_pipeline(clip, "-o", tmp_path / name, "--frames", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(existing_frames(tmp_path / name)) == 2 and not hidden(tmp_path)


@pytest.mark.parametrize("option", ["-progress", "--stats-json"])
def test_a_report_cannot_be_one_of_the_frames(clip, tmp_path, option):
    one_error(run_pipeline(clip, "-o", tmp_path / "f%03d.png", option, tmp_path / "f002.png", "-y", cwd=tmp_path),
              2, "one of the frames")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("which", ["config", "plugin", "lut"])
def test_with_y_a_frame_name_that_is_a_file_the_run_reads_is_refused(clip, tmp_path, which):
    """-y replaced the run's own LUT, config file or plugin sitting at a frame's name with a picture."""
    frames = tmp_path / "frames"
    frames.mkdir()
    lut = Path(__file__).resolve().parents[1] / "pipeline/presets/luts/warm.cube"
    (kept := frames / "0002.png").write_text({"config": 'filters = "hflip"\n', "lut": lut.read_text(),
                                              "plugin": "# a plugin that registers nothing\n"}[which])
    args = {"config": ("--config", kept), "plugin": ("--plugin", kept), "lut": ("-vf", f"lut3d=file={kept}")}[which]
    before = kept.read_bytes()
    r = run_pipeline(clip, "-o", frames / "%04d.png", "-y", "--frames", "3", *args, cwd=tmp_path)
    one_error(r, 2, "as one of its frames")
    assert kept.read_bytes() == before and sorted(p.name for p in frames.iterdir()) == ["0002.png"]


def test_a_zero_width_number_matches_only_numbered_names(tmp_path):
    (tmp_path / "g.png").write_bytes(b"x")
    (tmp_path / "g7.png").write_bytes(b"x")
    assert existing_frames(tmp_path / "g%00d.png") == ["g7.png"]


def test_a_failure_while_placing_removes_the_staging_and_says_how_far_it_got(tmp_path, monkeypatch):
    from pipeline import outfile

    target = tmp_path / "f%02d.png"
    staging = StagedSequence(target)
    staging.prepare()
    for i in (1, 2, 3):
        (staging.dir / f"f{i:02d}.png").write_bytes(b"new")
    real = outfile.place_output

    def racing(tmp, final, overwrite, name=None):
        if final.name == "f03.png":
            final.write_bytes(b"theirs")  # appeared between the check and the move
        real(tmp, final, overwrite, name)

    monkeypatch.setattr(outfile, "place_output", racing)
    with pytest.raises(ConfigError, match="2 of 3 frames were placed"):
        staging.place(False, target)
    assert not staging.dir.exists() and (tmp_path / "f03.png").read_bytes() == b"theirs"


def test_a_frame_the_directory_will_not_let_be_replaced_says_how_far_the_placing_got(tmp_path, monkeypatch):
    """A rename refused (another user's frame in a sticky directory, an immutable one) said nothing of the
    frames already replaced, and left the refused frame's temporary file in the output directory."""
    import errno

    from pipeline import outfile
    from pipeline.errors import OutputError

    target = tmp_path / "f%02d.png"
    for i in (1, 2, 3):
        (tmp_path / f"f{i:02d}.png").write_bytes(b"old")
    staging = StagedSequence(target)
    staging.prepare()
    for i in (1, 2, 3):
        (staging.dir / f"f{i:02d}.png").write_bytes(b"new")
    real = os.replace

    def refusing(src, dst, **kwargs):
        if str(dst).endswith("f02.png"):
            raise PermissionError(errno.EPERM, "Operation not permitted")
        real(src, dst, **kwargs)

    monkeypatch.setattr(outfile.os, "replace", refusing)
    with pytest.raises(OutputError, match="cannot place f02.png: Operation not permitted .1 of 3 frames were placed"):
        staging.place(True, target)
    assert sorted(os.listdir(tmp_path)) == ["f01.png", "f02.png", "f03.png"]  # nothing of the run's left over
    assert [(tmp_path / f"f{i:02d}.png").read_bytes() for i in (1, 2, 3)] == [b"new", b"old", b"old"]


def test_an_output_whose_rename_is_refused_leaves_no_temporary_file(clip, tmp_path, monkeypatch):
    import pipeline
    from pipeline import outfile

    (tmp_path / "out.mkv").write_bytes(b"theirs")
    monkeypatch.setattr(outfile.os, "replace", lambda *a, **k: (_ for _ in ()).throw(PermissionError(1, "no")))
    with pytest.raises(pipeline.OutputError, match="cannot finalise output"):
        pipeline.run(clip, tmp_path / "out.mkv", device="cpu", overwrite=True, frames=3)
    assert os.listdir(tmp_path) == ["out.mkv"] and (tmp_path / "out.mkv").read_bytes() == b"theirs"


def test_with_y_a_frame_that_is_a_link_is_written_through_it(clip, tmp_path):
    """As ffmpeg writes through a link, and as a single output file is: the link stays, the file it names
    (in another directory, or not there yet) gets the frame."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "two.png").write_bytes(b"old")
    os.symlink(elsewhere / "two.png", tmp_path / "f002.png")
    os.symlink(elsewhere / "three.png", tmp_path / "f003.png")  # dangling: the run makes the file it names
    result = run_pipeline(clip, "-o", tmp_path / "f%03d.png", "-y", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "f002.png").is_symlink() and (tmp_path / "f003.png").is_symlink()
    assert sorted(os.listdir(elsewhere)) == ["three.png", "two.png"] and not hidden(tmp_path)
    pictures = rgb_frames([tmp_path / "f001.png", elsewhere / "two.png", elsewhere / "three.png"])
    assert [p.shape for p in pictures] == [(64, 96, 3)] * 3 and not np.array_equal(pictures[1], pictures[2])


def staged_frame_linked_far(tmp_path: Path) -> tuple[StagedSequence, Path]:
    """A staged frame f01.png whose destination is a link to far/one.png (not there yet)."""
    target = tmp_path / "f%02d.png"
    staging = StagedSequence(target)
    staging.prepare()
    (staging.dir / "f01.png").write_bytes(b"new")
    (tmp_path / "far").mkdir()
    os.symlink(tmp_path / "far" / "one.png", tmp_path / "f01.png")
    return staging, target


def test_a_frame_linked_onto_another_file_system_is_copied_there(tmp_path, monkeypatch):
    staging, target = staged_frame_linked_far(tmp_path)
    real_rename = os.rename

    def no_cross_device(src, dst):
        if Path(dst).parent.name == "far":
            raise OSError(18, "Invalid cross-device link")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", no_cross_device)
    staging.place(True, target)
    assert (tmp_path / "far" / "one.png").read_bytes() == b"new" and (tmp_path / "f01.png").is_symlink()
    assert not staging.dir.exists() and os.listdir(tmp_path / "far") == ["one.png"]


@pytest.mark.parametrize("link, words", [
    ("loop", ["cannot be followed"]),
    ("missing/two.png", ["does not exist"]),
    ("f005.png", ["another frame"]),  # two frames, one file
    ("f_03d.png", ["stages its frames under"]),
])
def test_a_frame_link_that_cannot_take_its_frame_is_refused_before_the_run(clip, tmp_path, link, words):
    old = {n: b"old frame" for n in ("f001.png", "f003.png")}
    for name, data in old.items():
        (tmp_path / name).write_bytes(data)
    if link == "loop":
        os.symlink("loop", tmp_path / "loop")
    os.symlink(link, tmp_path / "f002.png")
    one_error(run_pipeline(clip, "-o", tmp_path / "f%03d.png", "-y", cwd=tmp_path), 4, "f002.png", *words)
    assert all((tmp_path / n).read_bytes() == data for n, data in old.items()) and not hidden(tmp_path)


def test_two_frames_linked_to_one_file_are_refused_before_the_run(clip, tmp_path):
    (tmp_path / "ext").mkdir()
    os.symlink("ext/same.png", tmp_path / "f001.png")
    os.symlink("f001.png", tmp_path / "f002.png")  # through the other link: the same file
    one_error(run_pipeline(clip, "-o", tmp_path / "f%03d.png", "-y", cwd=tmp_path), 4, "f002.png", "as f001.png is")
    assert os.listdir(tmp_path / "ext") == []


def test_a_replaced_frame_keeps_its_permissions(clip, tmp_path):
    """As a single output does: a private picture stays private, through a link too."""
    (tmp_path / "ext").mkdir()
    private, shared = tmp_path / "f001.png", tmp_path / "ext" / "two.png"
    for path, mode in ((private, 0o600), (shared, 0o640)):
        path.write_bytes(b"old")
        path.chmod(mode)
    os.symlink("ext/two.png", tmp_path / "f002.png")
    assert run_pipeline(clip, "-o", tmp_path / "f%03d.png", "-y", cwd=tmp_path).returncode == 0
    assert [p.stat().st_mode & 0o777 for p in (private, shared)] == [0o600, 0o640]
    assert private.read_bytes()[:4] == shared.read_bytes()[:4] == b"\x89PNG"


def test_a_report_that_a_frame_links_to_is_refused(clip, tmp_path):
    os.symlink("stats.json", tmp_path / "f002.png")
    result = run_pipeline(clip, "-o", tmp_path / "f%03d.png", "-y", "--stats-json", tmp_path / "stats.json",
                          cwd=tmp_path)
    one_error(result, 2, "stats.json", "through a link")


def test_frames_are_placed_in_number_order(tmp_path, monkeypatch):
    """As the muxer writes them (f9 before f10), whatever the names' order."""
    from pipeline import outfile

    target = tmp_path / "f%d.png"
    staging = StagedSequence(target)
    staging.prepare()
    for i in (1, 2, 9, 10, 11):
        (staging.dir / f"f{i}.png").write_bytes(b"new")
    order = []
    real = outfile.place_output
    monkeypatch.setattr(outfile, "place_output",
                        lambda tmp, final, overwrite, name=None: (order.append(final.name), real(tmp, final, overwrite)))
    staging.place(False, target)
    assert order == ["f1.png", "f2.png", "f9.png", "f10.png", "f11.png"]


def test_a_frame_that_cannot_be_moved_beside_its_link_is_an_output_error(tmp_path, monkeypatch):
    from pipeline.errors import OutputError

    staging, target = staged_frame_linked_far(tmp_path)

    def refused(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "rename", refused)
    with pytest.raises(OutputError, match="cannot write the frame there: Permission denied"):
        staging.place(True, target)
    assert os.listdir(tmp_path / "far") == [] and not staging.dir.exists()


def test_a_discard_while_placing_through_a_link_leaves_nothing_beside_its_file(tmp_path, monkeypatch):
    """A third signal drops the staging while a frame sits beside the file its link names, renamed onto
    it next: that temporary file goes too."""
    from pipeline import outfile
    from pipeline.errors import OutputError

    staging, target = staged_frame_linked_far(tmp_path)

    def interrupted(tmp, final, overwrite, name=None):
        assert tmp.parent == tmp_path / "far" and tmp.exists()  # moved beside far/one.png
        staging.discard()  # what the signal handler does
        raise OutputError("stopped")

    monkeypatch.setattr(outfile, "place_output", interrupted)
    with pytest.raises(OutputError):
        staging.place(True, target)
    assert os.listdir(tmp_path / "far") == [] and not staging.dir.exists()


def test_staged_frames_being_placed_are_not_discarded_and_placing_ends(tmp_path):
    target = tmp_path / "f%02d.png"
    staging = StagedSequence(target)
    staging.prepare()
    (staging.dir / "f01.png").write_bytes(b"new")
    staging.placing = True
    assert not staging.hold() and staging.dir.exists()  # nothing held: a signal drops nothing now
    staging.placing = False
    staging.place(False, target)
    assert not staging.placing and (tmp_path / "f01.png").read_bytes() == b"new"


def test_frame_names_as_printf_writes_them(tmp_path):
    from pipeline.sequence import frame_name, frame_names

    assert frame_name(Path("f%03d.png"), 7) == "f007.png" and frame_name(Path("%d.jpg"), 12) == "12.jpg"
    assert frame_name(Path("f%3d.png"), 7) == "f  7.png" and frame_names(Path("f%3d.png")).fullmatch("f  7.png")


def test_progress_bytes_look_only_at_new_frames(tmp_path, monkeypatch):
    target = tmp_path / "f%03d.png"
    staging = StagedSequence(target)
    staging.prepare()
    (staging.dir / "f001.png").write_bytes(b"a" * 10)
    assert staging.written_bytes() == 10
    (staging.dir / "f001.png").write_bytes(b"a" * 15)  # still being written: counted again
    (staging.dir / "f002.png").write_bytes(b"b" * 5)
    assert staging.written_bytes() == 20
    seen = []
    real_stat = Path.stat
    monkeypatch.setattr(Path, "stat", lambda self, **kw: seen.append(self.name) or real_stat(self, **kw))
    (staging.dir / "f003.png").write_bytes(b"c" * 7)
    assert staging.written_bytes() == 27 and "f001.png" not in seen  # frame 1 is whole: not looked at again


def test_a_second_discard_leaves_a_later_runs_staging_alone(tmp_path):
    """discard() kept its claim: called again (a placing that failed, then the sink's abort), it removed the
    staging directory another run of this process had claimed since."""
    target = tmp_path / "f%03d.png"
    first = StagedSequence(target)
    first.prepare()
    first.discard()
    second = StagedSequence(target)
    second.prepare()
    (second.dir / "f001.png").write_bytes(b"frame")
    first.discard()
    assert (second.dir / "f001.png").exists()
    second.discard()
    assert not second.dir.exists()
