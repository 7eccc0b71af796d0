"""Image loading: orientation, modes, bit depth, size limits and clear errors, from a real photo."""

from __future__ import annotations

import hashlib
import io
import struct
import zlib

import numpy as np
import pytest
from PIL import ExifTags, Image

from sam3_agent.errors import InputError
from sam3_agent.images import MAX_PIXELS, MIN_SIDE, file_name_of, image_digest, load_image
from sam3_agent.package_files import ASSETS_DIR

ASSETS = ASSETS_DIR  # the photos the package ships
ORIENTATION = ExifTags.Base.Orientation


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    """astronaut.jpg cropped to 512 wide x 300 high (not square, so rotation shows in the size)."""
    return Image.open(ASSETS / "astronaut.jpg").convert("RGB").crop((0, 0, 512, 300))


def png_header_only(width: int, height: int) -> bytes:
    """A PNG with a valid IHDR claiming width x height (8-bit RGB) and no pixel data at all."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def encode(image: Image.Image, fmt: str, **params) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **params)
    return buf.getvalue()


# ---------------------------------------------------------------- orientation


def test_exif_orientation_6_is_applied_once(photo, tmp_path):
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    path = tmp_path / "rotated.jpg"
    photo.save(path, "JPEG", quality=95, exif=exif.tobytes())
    with Image.open(path) as raw:
        assert raw.getexif().get(ORIENTATION) == 6
        expected = np.asarray(raw.convert("RGB").transpose(Image.Transpose.ROTATE_270))

    loaded = load_image(path)
    assert loaded.mode == "RGB" and loaded.size == (300, 512)
    assert np.array_equal(np.asarray(loaded), expected)
    assert loaded.getexif().get(ORIENTATION) is None
    # Loading the result again does not rotate it a second time.
    again = load_image(loaded)
    assert again.size == (300, 512) and np.array_equal(np.asarray(again), expected)
    # Same from bytes and from str paths.
    assert np.array_equal(np.asarray(load_image(path.read_bytes())), expected)
    assert np.array_equal(np.asarray(load_image(str(path))), expected)


def test_image_without_orientation_keeps_its_pixels(photo):
    loaded = load_image(photo)
    assert loaded is not photo
    assert loaded.size == (512, 300) and loaded.tobytes() == photo.tobytes()


# ---------------------------------------------------------------- modes


def test_transparent_pixels_become_white_and_partial_alpha_is_composited(photo, tmp_path):
    rgba = np.dstack([np.asarray(photo), np.full((300, 512), 255, np.uint8)])
    rgba[:50, :50, 3] = 0
    rgba[100:110, 100:110, 3] = 128
    path = tmp_path / "alpha.png"
    Image.fromarray(rgba, "RGBA").save(path)

    out = np.asarray(load_image(path))
    assert out.shape == (300, 512, 3)
    assert (out[:50, :50] == 255).all()
    src = np.asarray(photo).astype(int)
    assert np.array_equal(out[200:, 200:], src[200:, 200:])  # opaque: unchanged
    expected = (src[100:110, 100:110] * 128 + 255 * 127 + 127) // 255
    assert np.array_equal(out[100:110, 100:110], expected)


def test_palette_image_with_transparent_index_is_composited_on_white(photo):
    pal = photo.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    index = np.asarray(pal)[0, 0]
    data = encode(pal, "PNG", transparency=int(index))
    out = np.asarray(load_image(data))
    transparent = np.asarray(Image.open(io.BytesIO(data))) == index
    assert transparent.any()
    assert (out[transparent] == 255).all()
    opaque_expected = np.asarray(pal.convert("RGB"))[~transparent]
    assert np.array_equal(out[~transparent], opaque_expected)


def test_16bit_png_is_rescaled_by_its_true_range(photo):
    gray = np.asarray(photo.convert("L")).astype(np.uint16) * 4000 // 255
    gray[0, 0], gray[0, 1], gray[0, 2] = 0, 4000, 800
    data = encode(Image.fromarray(gray), "PNG")
    assert Image.open(io.BytesIO(data)).mode in ("I;16", "I")
    out = np.asarray(load_image(data))
    assert out.dtype == np.uint8 and out.shape == (300, 512, 3)
    assert out[0, 0].tolist() == [0, 0, 0]
    assert out[0, 1].tolist() == [255, 255, 255]  # 4000 -> 255, not clipped at 255 -> 15.7 %
    assert out[0, 2].tolist() == [51, 51, 51]  # 800 * 255 / 4000
    assert np.abs(out[..., 0].astype(int) - np.rint(gray.astype(np.float64) * 255 / 4000)).max() <= 1


def test_32bit_integer_and_float_modes_are_rescaled_by_their_range(photo):
    values = np.asarray(photo.convert("L")).astype(np.int32) * 1000 - 50_000  # -50000 .. 205000
    values[0, 0], values[0, 1] = -50_000, 205_000
    out = np.asarray(load_image(Image.fromarray(values, mode="I")))
    assert out[0, 0].tolist() == [0, 0, 0] and out[0, 1].tolist() == [255, 255, 255]

    floats = np.linspace(-1.0, 3.0, 300 * 512, dtype=np.float32).reshape(300, 512)
    out = np.asarray(load_image(Image.fromarray(floats, mode="F")))
    assert out[0, 0].tolist() == [0, 0, 0] and out[-1, -1].tolist() == [255, 255, 255]
    assert out[150, 0, 0] == np.rint((floats[150, 0] + 1) / 4 * 255)


@pytest.mark.parametrize("mode", ["L", "1", "CMYK", "YCbCr", "P"])
def test_other_modes_are_converted_to_rgb_by_pillow(photo, mode):
    converted = photo.convert(mode)
    out = load_image(converted)
    assert out.mode == "RGB" and out.size == (512, 300)
    assert out.tobytes() == converted.convert("RGB").tobytes()


# ---------------------------------------------------------------- arrays


def test_uint8_arrays_load_as_rgb(photo):
    rgb = np.asarray(photo)
    assert load_image(rgb).tobytes() == photo.tobytes()
    gray = rgb[..., 0]
    assert np.array_equal(np.asarray(load_image(gray)), np.dstack([gray] * 3))
    assert np.array_equal(np.asarray(load_image(gray[..., None])), np.dstack([gray] * 3))


def test_float_arrays_in_unit_range_scale_by_255_and_bool_maps_to_0_255(photo):
    unit = np.asarray(photo).astype(np.float64) / 255.0
    assert np.array_equal(np.asarray(load_image(unit)), np.asarray(photo))
    binary = np.asarray(photo)[..., 0] > 128
    out = np.asarray(load_image(binary))
    assert set(np.unique(out).tolist()) == {0, 255}
    assert np.array_equal(out[..., 1] == 255, binary)


def test_rgba_uint16_array_keeps_alpha_meaning(photo):
    rgb16 = np.asarray(photo).astype(np.uint16) * 257  # full 16-bit range
    alpha = np.full((300, 512, 1), 65535, np.uint16)
    alpha[:10, :10] = 0
    out = np.asarray(load_image(np.concatenate([rgb16, alpha], axis=2)))
    assert (out[:10, :10] == 255).all()
    lo, hi = int(rgb16.min()), int(rgb16.max())
    expected = np.rint((rgb16[20:, 20:].astype(np.float64) - lo) * 255 / (hi - lo))
    assert np.abs(out[20:, 20:].astype(int) - expected).max() <= 1


@pytest.mark.parametrize(
    "array, message",
    [
        (np.zeros((20, 20, 5), np.uint8), r"must have shape"),
        (np.zeros((2, 20, 20, 3), np.uint8), r"must have shape"),
        (np.zeros((20, 20, 3), np.complex64), r"got dtype complex64"),
        (np.array([["a"] * 20] * 20), r"got dtype <U1"),
        (np.full((20, 20), np.nan), r"NaN or infinite"),
        (np.zeros((5, 100), np.uint8), r"at least 8 pixels"),
    ],
)
def test_bad_arrays_are_refused(array, message):
    with pytest.raises(InputError, match=message):
        load_image(array)


# ---------------------------------------------------------------- errors


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="image file not found"):
        load_image(tmp_path / "nope.jpg")


def test_text_file_is_not_an_image(tmp_path):
    path = tmp_path / "notes.jpg"
    path.write_text("this is plain text, not a picture\n")
    with pytest.raises(InputError, match="is not an image"):
        load_image(path)


def test_directory_is_refused(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        load_image(tmp_path)


def test_truncated_jpeg_is_an_input_error(photo):
    data = encode(photo, "JPEG", quality=90)
    with pytest.raises(InputError, match="truncated or corrupt"):
        load_image(data[: len(data) // 2])


def test_corrupt_png_data_is_an_input_error(photo):
    data = bytearray(encode(photo, "PNG"))
    data[100:140] = b"\x00" * 40  # inside the first IDAT chunk: CRC and stream broken
    with pytest.raises(InputError, match="corrupt"):
        load_image(bytes(data))


def test_huge_header_is_refused_before_decoding():
    # No pixel data follows the header: decoding would fail with a different error.
    with pytest.raises(InputError, match="pixel limit"):
        load_image(png_header_only(20000, 20000))
    # Below Pillow's own bomb limit, our own check (64 M) answers with the exact size.
    with pytest.raises(InputError, match=r"9000x8000 = 72,000,000 pixels, above the pixel limit of 64,000,000"):
        load_image(png_header_only(9000, 8000))


def test_pixel_limit_is_configurable(photo):
    assert MAX_PIXELS == 64_000_000
    with pytest.raises(InputError, match="pixel limit of 100,000"):
        load_image(photo, max_pixels=100_000)
    with pytest.raises(InputError, match="pixel limit of 100,000"):
        load_image(np.asarray(photo), max_pixels=100_000)
    assert load_image(photo, max_pixels=512 * 300).size == (512, 300)


def test_too_small_image_is_refused(photo):
    assert MIN_SIDE == 8
    with pytest.raises(InputError, match="at least 8 pixels"):
        load_image(encode(photo.resize((7, 40)), "PNG"))
    assert load_image(photo.resize((8, 8))).size == (8, 8)


def test_unsupported_source_type_is_refused():
    with pytest.raises(InputError, match="unsupported image source of type int"):
        load_image(42)  # type: ignore[arg-type]


# ---------------------------------------------------------------- digest


def test_image_digest_hashes_mode_size_and_pixels(photo):
    expected = hashlib.sha256(b"RGB:512x300:" + photo.tobytes()).hexdigest()
    assert image_digest(photo) == expected
    assert image_digest(load_image(photo)) == expected
    assert image_digest(photo.convert("L")) != expected


@pytest.mark.parametrize("path, name", [
    ("/tmp/gradio/3f2a/coffee.jpg", "coffee.jpg"),
    ("coffee.jpg", "coffee.jpg"),
    ("/photos/back\\slash.jpg", "back\\slash.jpg"),  # a legal character in a POSIX file name
    (" spaced .jpg", " spaced .jpg"),
    ("a\x00b\n.png", "ab.png"),
    ("/tmp/\udcff\udcfe.jpg", ".jpg"),  # undecodable bytes (surrogate escapes) cannot go into JSON
    ("/tmp/folder/", "folder"),
    ("", None),
    ("/", None),
    (None, None),
    (42, None),
    ("x" * 300 + ".png", "x" * 255),
])
def test_file_name_of_keeps_only_a_printable_file_name(path, name):
    assert file_name_of(path) == name


# ---------------------------------------------------------------- phone formats, URLs, special files


@pytest.mark.parametrize("fmt", ["HEIF", "AVIF"])
def test_phone_photo_formats_load_like_any_other(photo, tmp_path, fmt):
    path = tmp_path / f"IMG_0001.{fmt.lower()}"
    photo.save(path, fmt, quality=90)
    loaded = load_image(path)
    assert loaded.mode == "RGB" and loaded.size == (512, 300)
    # lossy, but the same picture: mean absolute difference of a few grey levels
    assert np.abs(np.asarray(loaded, np.int16) - np.asarray(photo, np.int16)).mean() < 8


@pytest.mark.parametrize("url", ["https://example.com/cat.jpg", "http://127.0.0.1/x.png", "file:///tmp/x.png"])
def test_a_url_is_refused_with_advice_instead_of_being_read_as_a_path(url):
    with pytest.raises(InputError, match=r"is a URL; images are read from files only: download it first"):
        load_image(url)


def test_a_fifo_is_refused_at_once_instead_of_blocking(tmp_path):
    import os

    fifo = tmp_path / "photo.jpg"
    os.mkfifo(fifo)  # opening it for reading would wait forever for a writer
    with pytest.raises(InputError, match="is not a regular file"):
        load_image(fifo)


def test_messages_name_the_file_as_asked_never_the_server_path(tmp_path):
    path = tmp_path / "gradio" / "0123abcd" / "notes.jpg"
    path.parent.mkdir(parents=True)
    path.write_text("plain text")
    with pytest.raises(InputError) as caught:
        load_image(path, name="notes.jpg")
    assert "'notes.jpg' is not an image" in str(caught.value) and str(tmp_path) not in str(caught.value)


def test_the_advice_over_the_limit_is_the_callers(photo):
    with pytest.raises(InputError) as caught:
        load_image(photo, max_pixels=100_000, limit_advice="this app takes photos up to 0.1 MP: downscale it")
    assert str(caught.value).endswith("above the pixel limit of 100,000; this app takes photos up to 0.1 MP: "
                                      "downscale it")
    assert "--max-image-pixels" not in str(caught.value)


def test_running_out_of_memory_while_decoding_is_an_input_error(photo, monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError

    gray = encode(photo.convert("L"), "PNG")
    monkeypatch.setattr(Image.Image, "convert", no_memory)
    with pytest.raises(InputError, match="not enough memory left to decode this image"):
        load_image(gray)
