"""Every loader (trace folder and .zip, bundle, the app's Inspect and Correct uploads, the CLI's export) refuses
hostile or damaged files with the project's own message, before allocating what the file only claims."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import struct
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import KnownSegmenter, photo, tool, verdict
from PIL import Image, ImageFile

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.cli.main import main
from sam3_agent.correct.edits import EditState, paint
from sam3_agent.correct.export import bundle_bytes, load_bundle
from sam3_agent.correct.saved import load_trace as load_saved
from sam3_agent.errors import TraceFormatError
from sam3_agent.rle import check_rle, decode_rle, encode_rle
from sam3_agent.trace.io import load_trace, load_trace_zip, save_trace, trace_to_zip_bytes
from sam3_agent.trace.safe_read import MAX_ZIP_MEMBERS
from sam3_agent.ui.correct.handlers import CorrectHandlers
from sam3_agent.ui.correct.trace_upload import trace_from_upload
from sam3_agent.ui.run.handlers import Handlers
from sam3_agent.ui.run.runner import AgentFactory
from sam3_agent.ui.settings import AppSettings
from sam3_agent.vlm.scripted import ScriptedVLM

# A user-visible message must never name a Python exception class (KeyError, BadZipFile, zlib.error...).
EXCEPTION_NAME = re.compile(r"\b(\w*Error|\w*Exception|BadZipFile|Traceback|zlib\.error)\b")


@pytest.fixture(scope="module")
def coffee_trace():
    """A finished run on coffee.jpg (600 x 400, not square: a transposed size is detectable)."""
    segmenter = KnownSegmenter({"cup": [((100, 50, 300, 250), 0.9), ((350, 100, 500, 300), 0.8)]})
    vlm = ScriptedVLM([tool("segment_phrase", text_prompt="cup"), tool("examine_each_mask"),
                       tool("select_masks_and_return", final_answer_masks=[1])])
    verifier = ScriptedVLM([verdict("Accept"), verdict("Accept")])
    return Agent(vlm, segmenter, AgentConfig(), verifier=verifier).run(photo("coffee.jpg"), "the cup")


@pytest.fixture(scope="module")
def trace_zip(coffee_trace) -> bytes:
    """The run as a schema-2 trace .zip (photo, masks/*.json, views as recipes)."""
    return trace_to_zip_bytes(coffee_trace)


V1 = Path(__file__).parent / "data" / "v1"  # real schema-1 files (photo 64 x 48, every image a PNG, masks inline)


@pytest.fixture(scope="module")
def v1_zip() -> bytes:
    return (V1 / "edited_trace.zip").read_bytes()


@pytest.fixture(params=["schema2", "schema1"])
def any_zip(request, trace_zip, v1_zip) -> tuple[str, bytes]:
    """(schema, .zip bytes): each refusal holds for traces written today and for schema-1 traces being migrated."""
    return request.param, trace_zip if request.param == "schema2" else v1_zip


def members(data: bytes, pattern: str) -> list[str]:
    return [n for n in zipfile.ZipFile(io.BytesIO(data)).namelist() if re.fullmatch(pattern, n)]


def mask_records(data: bytes) -> list[str]:
    return members(data, r"masks/[^/]+\.json")


def photo_member(data: bytes) -> str:
    (name,) = members(data, r"images/(photo-[0-9a-f]+\.\w+|raw\.png)")
    return name


def rezip(data: bytes, replace: dict[str, bytes] | None = None, add: list[tuple[zipfile.ZipInfo | str, bytes]] = ()
          ) -> bytes:
    """``data`` (a .zip) with members replaced and others added."""
    replace = replace or {}
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, replace.get(info.filename, src.read(info.filename)))
        for name, member in add:
            dst.writestr(name, member)
    return out.getvalue()


def edit_json(data: bytes, name: str, change) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        document = json.loads(archive.read(name))
    change(document)
    return rezip(data, {name: json.dumps(document).encode()})


def patch_headers(data: bytes, name: str, *, size: int | None = None, flags: int | None = None) -> bytes:
    """Overwrite the declared uncompressed size and/or the flag bits of member ``name`` in both its local header
    and its central directory entry (as a hand-made hostile file would)."""
    out = bytearray(data)
    encoded = name.encode()
    for signature, flag_at, size_at, name_len_at, name_at in ((b"PK\x03\x04", 6, 22, 26, 30),
                                                              (b"PK\x01\x02", 8, 24, 28, 46)):
        start = 0
        while (start := out.find(signature, start)) >= 0:
            length = struct.unpack_from("<H", out, start + name_len_at)[0]
            if bytes(out[start + name_at:start + name_at + length]) == encoded:
                if size is not None:
                    struct.pack_into("<I", out, start + size_at, size)
                if flags is not None:
                    struct.pack_into("<H", out, start + flag_at, flags)
            start += 4
    return bytes(out)


# ------------------------------------------------------------------ every loader, one way to call each


def via_zip_bytes(path: Path, tmp: Path) -> str:
    load_trace_zip(path.read_bytes())
    return ""


def via_path(path: Path, tmp: Path) -> str:
    load_saved(path)
    return ""


def via_upload(path: Path, tmp: Path) -> str:
    trace_from_upload(str(path))
    return ""


def via_inspect_tab(path: Path, tmp: Path) -> str:
    messages: list[str] = []
    handlers = Handlers(AgentFactory(AppSettings(), None, None, "not loaded"), warn=messages.append, root=tmp / "app")
    state, status, *_ = handlers.inspect.load_trace(str(path))
    assert state is None and "status-error" in status
    return messages[0]


def via_correct_tab(path: Path, tmp: Path) -> str:
    messages: list[str] = []
    outputs = CorrectHandlers(lambda: None, messages.append, tmp / "app").upload(str(path))
    assert "status-error" in outputs.status and "Nothing was changed" in outputs.status
    return messages[0]


def via_cli_export(path: Path, tmp: Path) -> str:
    import contextlib

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["export", str(path), "--coco", str(tmp / "out.json")])
    assert code == 2 and not (tmp / "out.json").exists()
    return err.getvalue()


LOADERS = [via_zip_bytes, via_path, via_upload, via_inspect_tab, via_correct_tab, via_cli_export]


def refused(loader, data: bytes, tmp_path: Path, expected: str) -> str:
    """Load ``data`` (a .zip) with ``loader``; assert it is refused with a message containing ``expected`` that names
    no Python exception; return the message."""
    path = tmp_path / "upload.zip"
    path.write_bytes(data)
    try:
        message = loader(path, tmp_path)
    except TraceFormatError as error:
        message = str(error)
    else:
        assert message, "the loader accepted the file"
    assert expected in message, message
    assert not EXCEPTION_NAME.search(message), message
    return message


# ------------------------------------------------------------------ unsafe member names


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("name", ["../evil.png", "/etc/evil.png", "images/../../evil.png", "images\\evil.png",
                                  "C:/evil.png", "images//raw.png", "images/./raw.png"])
def test_a_zip_with_a_member_name_pointing_outside_is_refused(trace_zip, tmp_path, loader, name):
    message = refused(loader, rezip(trace_zip, add=[(name, b"x")]), tmp_path, "points outside its folder")
    assert repr(name) in message


@pytest.mark.parametrize("loader", LOADERS)
def test_a_zip_holding_a_link_is_refused(trace_zip, tmp_path, loader):
    link = zipfile.ZipInfo("images/link.png")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    refused(loader, rezip(trace_zip, add=[(link, b"/etc/passwd")]), tmp_path, "holds a link")


def test_a_bundle_with_an_unsafe_member_is_refused(coffee_trace):
    data = rezip(bundle_bytes(coffee_trace), add=[("trace/../../evil.json", b"{}")])
    with pytest.raises(TraceFormatError, match="points outside its folder"):
        load_bundle(data)


@pytest.mark.parametrize("loader", [via_zip_bytes, via_inspect_tab])
def test_a_zip_holding_one_name_twice_is_refused(trace_zip, tmp_path, loader):
    with pytest.warns(UserWarning, match="Duplicate name"):
        data = rezip(trace_zip, add=[("trace.json", b"{}")])
    refused(loader, data, tmp_path, "holds 'trace.json' twice")


@pytest.mark.parametrize("loader", [via_zip_bytes, via_correct_tab])
def test_a_zip_with_more_members_than_a_trace_has_is_refused(trace_zip, tmp_path, loader):
    extra = [(f"images/x{i}.png", b"") for i in range(MAX_ZIP_MEMBERS)]
    refused(loader, rezip(trace_zip, add=extra), tmp_path, f"a trace has at most {MAX_ZIP_MEMBERS:,}")


# ------------------------------------------------------------------ decoding faults


@pytest.mark.parametrize("loader", LOADERS)
def test_a_member_with_a_bad_crc_is_refused(trace_zip, tmp_path, loader):
    data = bytearray(zipfile.ZipFile(io.BytesIO(trace_zip)).read("trace.json"))
    stored = io.BytesIO()
    with zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("trace.json", bytes(data))
    damaged = bytearray(stored.getvalue())
    position = damaged.find(b'"query"')
    damaged[position + 1] = ord("Q")  # same length, different bytes: only the CRC can tell
    refused(loader, bytes(damaged), tmp_path, "is damaged (Bad CRC-32 for file 'trace.json')")


@pytest.mark.parametrize("loader", LOADERS)
def test_a_member_with_corrupt_deflate_data_is_refused(any_zip, tmp_path, loader):
    data = bytearray(any_zip[1])
    header = data.find(b"PK\x03\x04")
    while data[header + 30:header + 30 + len(b"trace.json")] != b"trace.json":  # trace.json: deflated in both schemas
        header = data.find(b"PK\x03\x04", header + 4)
    name_len, extra_len = struct.unpack_from("<HH", data, header + 26)
    start = header + 30 + name_len + extra_len
    data[start:start + 64] = b"\xff" * 64
    refused(loader, bytes(data), tmp_path, "compressed data is corrupt")


@pytest.mark.parametrize("loader", [via_zip_bytes, via_inspect_tab, via_cli_export])
def test_an_encrypted_member_is_refused(trace_zip, tmp_path, loader):
    refused(loader, patch_headers(trace_zip, "trace.json", flags=0x1), tmp_path, "holds an encrypted file")


@pytest.mark.parametrize("loader", [via_zip_bytes, via_inspect_tab, via_correct_tab, via_cli_export])
def test_deeply_nested_json_is_refused(trace_zip, tmp_path, loader):
    nested = b"[" * 200_000 + b"]" * 200_000
    refused(loader, rezip(trace_zip, {"trace.json": nested}), tmp_path, "nested too deeply")


@pytest.mark.parametrize("loader", [via_zip_bytes, via_inspect_tab, via_correct_tab])
def test_running_out_of_memory_while_decoding_is_reported_in_words(any_zip, tmp_path, loader, monkeypatch):
    import sam3_agent.trace.safe_decode as safe_read

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(safe_read, "validated_counts", no_memory)  # reading the masks' RLE, in either schema
    refused(loader, any_zip[1], tmp_path, "needs more memory than this machine has free")


# ------------------------------------------------------------------ sizes checked before allocating


def zip_bomb_member(declared: int, real: int) -> bytes:
    """A .zip whose trace.json declares ``declared`` bytes but inflates to ``real`` zero bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive, archive.open("trace.json", "w") as member:
        chunk = b"\0" * (1 << 20)
        for _ in range(real // len(chunk)):
            member.write(chunk)
    return patch_headers(out.getvalue(), "trace.json", size=declared)


@pytest.mark.parametrize("loader", [via_zip_bytes, via_upload])
def test_a_member_inflating_past_its_declared_size_stops_within_the_declared_size(tmp_path, loader):
    data = zip_bomb_member(declared=1000, real=64 << 20)  # 64 KB on disk, 64 MB inflated
    assert len(data) < 200_000
    tracemalloc.start()
    try:
        refused(loader, data, tmp_path, "cannot be read")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak:,} bytes allocated while refusing a 1,000-byte member"


def test_a_zip_whose_declared_sizes_exceed_the_budget_is_refused_unread(tmp_path):
    data = patch_headers(zip_bomb_member(declared=1000, real=1 << 20), "trace.json", size=4_000_000_000)
    with pytest.raises(TraceFormatError, match="once unpacked, above the 400 MB this app reads"):
        load_trace_zip(data)


def transpose_masks(document: dict) -> None:
    """Transpose every mask record consistently: both its size and its RLEs (a hand-edited or foreign trace)."""
    def flip(record):
        if record is None:
            return
        masks = decode_rle(record["rle"]) if record["rle"] else np.zeros((0, *record["size"]), dtype=bool)
        record["size"] = record["size"][::-1]
        record["rle"] = encode_rle(masks.transpose(0, 2, 1)) if len(masks) else []

    for r in document["rounds"]:
        if r["result"]:
            flip(r["result"]["masks"])
            flip(r["result"]["final_masks"])
    flip(document["final_masks"])


def transpose_mask_files(data: bytes) -> bytes:
    """A schema-2 .zip with every mask set file transposed consistently: its size and each mask's RLE."""
    replace = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in mask_records(data):
            record = json.loads(archive.read(name))
            if "rle" in record:
                height, width = record["size"]
                masks = decode_rle([{"size": [height, width], "counts": c} for c in record["rle"]], height=height,
                                   width=width)
                record["rle"] = [r["counts"] for r in encode_rle(masks.transpose(0, 2, 1))] if len(masks) else []
            record["size"] = record["size"][::-1]
            replace[name] = json.dumps(record).encode()
    return rezip(data, replace)


@pytest.mark.parametrize("loader", LOADERS)
def test_masks_transposed_consistently_are_refused_against_the_image(any_zip, tmp_path, loader):
    schema, data = any_zip
    if schema == "schema2":
        refused(loader, transpose_mask_files(data), tmp_path, "do not match the image's [400, 600]")
    else:
        refused(loader, edit_json(data, "trace.json", transpose_masks), tmp_path, "do not match the image's [48, 64]")


def test_a_transposed_mask_in_a_schema_1_trace_folder_is_refused(tmp_path):
    # Schema 1 gives each mask its own size; schema 2 gives a mask set one size, checked by the test above.
    shutil.copytree(V1 / "run", tmp_path / "run")
    document = json.loads((tmp_path / "run" / "trace.json").read_text())
    rle = document["final_masks"]["rle"][0]
    mask = decode_rle([rle])[0]
    document["final_masks"]["rle"][0] = encode_rle(mask.T)[0]  # the record's size left as it was
    (tmp_path / "run" / "trace.json").write_text(json.dumps(document))
    with pytest.raises(TraceFormatError, match=r"is 48x64 pixels \(width x height\) but the image is 64x48"):
        load_trace(tmp_path / "run")


@pytest.mark.parametrize("loader", [via_zip_bytes, via_inspect_tab, via_correct_tab])
def test_an_rle_claiming_a_huge_size_is_refused_before_decoding(any_zip, tmp_path, loader):
    schema, data = any_zip

    def huge(document):
        if schema == "schema2":  # one size for the whole set
            document["size"] = [20000, 20000]
            document["rle"] = ["0"]
        else:
            document["final_masks"]["rle"] = [{"size": [20000, 20000], "counts": "0"}]  # would decode to 400 MB

    if schema == "schema2":
        changed, expected = edit_json(data, mask_records(data)[0], huge), "of size [20000, 20000] (height, width)"
    else:
        changed, expected = edit_json(data, "trace.json", huge), "is 20000x20000 pixels"
    tracemalloc.start()
    try:
        refused(loader, changed, tmp_path, expected)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


@pytest.mark.parametrize("loader", [via_zip_bytes, via_inspect_tab, via_correct_tab])
def test_an_edit_mask_of_another_size_is_refused(coffee_trace, tmp_path, loader):
    state = paint(EditState.from_trace(coffee_trace), None, np.ones((400, 600), dtype=bool))
    data = trace_to_zip_bytes(state.to_trace(coffee_trace))

    def transposed(document):
        document["edits"][0]["stroke"] = encode_rle(np.ones((600, 400), dtype=bool))[0]

    refused(loader, edit_json(data, "trace.json", transposed), tmp_path, "holds a stroke of 400x600 pixels")


def big_blank_png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("1", (width, height)).save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


@pytest.mark.parametrize("loader", [via_zip_bytes, via_inspect_tab, via_correct_tab])
def test_images_larger_than_any_view_of_the_photo_are_refused_before_decoding(v1_zip, tmp_path, loader, monkeypatch):
    # Stored images exist in schema 1 and in a migrated trace saved again (schema 2 keeps them as files); views of
    # runs made today are recipes, rendered from the photo.
    resaved = trace_to_zip_bytes(load_trace_zip(v1_zip))
    for data, pattern in ((v1_zip, r"images/\w+_view\.png"), (resaved, r"images/\w+_view-[0-9a-f]+\.png")):
        images_refused(data, members(data, pattern), tmp_path, loader, monkeypatch)


def images_refused(data: bytes, names: list[str], tmp_path: Path, loader, monkeypatch) -> None:
    assert names
    blank = big_blank_png(12000, 12000)  # 1-bit: tiny on disk, 432 MB once decoded as RGB
    assert len(blank) < 100_000
    decoded: list[tuple[int, int]] = []
    original = ImageFile.ImageFile.load

    def watched(image):
        decoded.append(image.size)
        return original(image)

    monkeypatch.setattr(ImageFile.ImageFile, "load", watched)
    refused(loader, rezip(data, {n: blank for n in names}), tmp_path, "is 12000x12000 pixels, larger than")
    assert (12000, 12000) not in decoded
    monkeypatch.setattr(ImageFile.ImageFile, "load", original)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares ``width`` x ``height`` and holds no pixels: only the header can be read."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


@pytest.mark.parametrize(("schema", "size", "expected"), [
    ("schema1", (9000, 8000), "is 9000x8000 pixels, larger than this trace's images can be"),  # > 64 MP (schema 1)
    ("schema2", (17000, 16000), "has far more pixels than this trace's images can have"),  # > 256 MP, past Pillow's cap
])
def test_a_photo_above_the_pixel_cap_is_refused_before_decoding(trace_zip, v1_zip, schema, size, expected):
    data = trace_zip if schema == "schema2" else v1_zip
    data = rezip(data, {photo_member(data): png_header_only(*size)})
    with pytest.raises(TraceFormatError, match=expected):
        load_trace_zip(data)


def test_check_rle_refuses_runs_that_do_not_cover_the_image():
    with pytest.raises(TraceFormatError, match="covering 5 pixels, not the image's 6"):
        check_rle({"size": [2, 3], "counts": "05"}, 2, 3, "the mask")


# ------------------------------------------------------------------ trace folders


def trace_folder(schema: str, coffee_trace, folder: Path) -> Path:
    """A trace folder of ``schema`` in ``folder``; returns its photo file."""
    if schema == "schema2":
        save_trace(coffee_trace, folder)
    else:
        shutil.copytree(V1 / "run", folder)
    (photo,) = [p for p in (folder / "images").iterdir() if p.name == "raw.png" or p.name.startswith("photo-")]
    return photo


@pytest.mark.parametrize("schema", ["schema2", "schema1"])
def test_a_fifo_in_a_trace_folder_is_refused_without_blocking(coffee_trace, tmp_path, schema):
    photo = trace_folder(schema, coffee_trace, tmp_path / "run")
    photo.unlink()
    os.mkfifo(photo)
    with pytest.raises(TraceFormatError, match=f"'images/{photo.name}' in the trace folder .* is not a regular file"):
        load_trace(tmp_path / "run")


def test_a_fifo_given_as_the_trace_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    with pytest.raises(TraceFormatError, match="is not a regular file"):
        load_trace(fifo)


@pytest.mark.parametrize("schema", ["schema2", "schema1"])
def test_a_link_out_of_a_trace_folder_is_refused(coffee_trace, tmp_path, schema):
    raw = trace_folder(schema, coffee_trace, tmp_path / "run")
    outside = tmp_path / "elsewhere.png"
    raw.rename(outside)
    raw.symlink_to(outside)
    with pytest.raises(TraceFormatError, match="is a link to a file outside the folder"):
        load_trace(tmp_path / "run")


def test_a_good_trace_still_loads_through_every_path(coffee_trace, trace_zip, tmp_path):
    (tmp_path / "t.zip").write_bytes(trace_zip)
    save_trace(coffee_trace, tmp_path / "folder")
    assert load_trace_zip(trace_zip) == coffee_trace
    assert load_trace(tmp_path / "t.zip") == coffee_trace
    assert load_trace(tmp_path / "folder") == coffee_trace
    assert trace_from_upload(str(tmp_path / "t.zip")) == coffee_trace
    assert load_bundle(bundle_bytes(coffee_trace)).trace == coffee_trace
