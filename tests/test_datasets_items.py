"""Batch items from a JSONL file or a folder; ids and output folder names."""

from __future__ import annotations

import json

import pytest

from sam3_agent.datasets.batch.items import derived_id, folder_names, read_items
from sam3_agent.errors import InputError


def jsonl(tmp_path, *lines: str):
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_jsonl_items_resolve_relative_paths_against_the_file(tmp_path):
    path = jsonl(tmp_path, '{"image": "photos/a.jpg", "query": " the cup ", "id": "first"}', "",
                 '{"image": "/abs/b.png", "query": "the dog", "id": 7}')
    first, second = read_items(path)
    assert (first.id, first.image, first.image_ref, first.query) == ("first", tmp_path / "photos/a.jpg", "photos/a.jpg",
                                                                    "the cup")
    assert (second.id, str(second.image)) == ("7", "/abs/b.png")


def test_items_without_id_get_a_stable_id_from_image_and_query(tmp_path):
    a = '{"image": "photos/a.jpg", "query": "the cup"}'
    b = '{"image": "photos/a.jpg", "query": "the saucer"}'
    forward = [i.id for i in read_items(jsonl(tmp_path, a, b))]
    backward = [i.id for i in read_items(jsonl(tmp_path, b, a))]
    assert forward == backward[::-1]
    assert forward[0] == derived_id("photos/a.jpg", "the cup") and forward[0].startswith("a-") and len(forward[0]) == 10
    assert forward[0] != forward[1]


@pytest.mark.parametrize(
    "line, message",
    [
        ("[1, 2]", "expected a JSON object"),
        ('{"query": "x"}', '"image" must be the path'),
        ('{"image": "a.jpg", "query": "   "}', "the query is empty"),
        ('{"image": "a.jpg", "query": "' + "x" * 2001 + '"}', "at most 2000"),
        ('{"image": "a.jpg", "query": "x", "id": true}', '"id" must be'),
        ('{"image": "a.jpg", "query": "x", "id": "a\\u0007"}', "printable"),
        ('{"image": "a.jpg", "query": "x"', "not valid JSON"),
    ],
)
def test_bad_lines_are_named(tmp_path, line, message):
    with pytest.raises(InputError, match=message) as error:
        read_items(jsonl(tmp_path, '{"image": "ok.jpg", "query": "fine"}', line))
    assert "line 2" in str(error.value)


def test_repeated_ids_are_refused(tmp_path):
    line = json.dumps({"image": "a.jpg", "query": "x"})
    with pytest.raises(InputError) as error:
        read_items(jsonl(tmp_path, line, line))
    assert str(error.value) == (f"{tmp_path / 'items.jsonl'}, line 2: repeats the id 'a-{derived_id('a.jpg', 'x')[2:]}' "
                                "of line 1; ids must be unique")


def test_every_bad_line_is_named_in_one_message(tmp_path):
    good = json.dumps({"image": "a.jpg", "query": "x", "id": "one"})
    path = jsonl(tmp_path, good, "[1]", "", '{"image": "b.jpg"', good, '{"image": "c.jpg", "query": ""}')
    with pytest.raises(InputError) as error:
        read_items(path)
    assert str(error.value) == (
        f"{path} has 4 bad lines; nothing was run: fix them and run again\n"
        '  line 2: expected a JSON object with "image" (or "video") and "query"\n'
        "  line 4: not valid JSON (Expecting ',' delimiter, column 18)\n"
        "  line 5: repeats the id 'one' of line 1; ids must be unique\n"
        "  line 6: the query is empty: describe what to segment, e.g. 'the leftmost child'"
    )


def test_a_long_list_of_bad_lines_is_cut_after_twenty(tmp_path):
    path = jsonl(tmp_path, *["[1]"] * 23)
    with pytest.raises(InputError) as error:
        read_items(path)
    lines = str(error.value).split("\n")
    assert lines[0] == f"{path} has 23 bad lines; nothing was run: fix them and run again"
    assert lines[1] == '  line 1: expected a JSON object with "image" (or "video") and "query"'
    assert lines[20] == '  line 20: expected a JSON object with "image" (or "video") and "query"'
    assert lines[21:] == ["  and 3 more"]


@pytest.mark.parametrize("separator", ["\u2028", "\u0085"])
def test_a_query_with_a_unicode_line_separator_stays_one_record(tmp_path, separator):
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps({"image": "a.jpg", "query": f"the cup{separator}on the left"}, ensure_ascii=False)
                    + "\n", encoding="utf-8")
    (item,) = read_items(path)
    assert item.query == f"the cup{separator}on the left"


def test_a_windows_file_with_byte_order_mark_and_crlf_is_read(tmp_path):
    path = tmp_path / "items.jsonl"
    lines = [json.dumps({"image": "a.jpg", "query": "the cup", "id": "a"}),
             json.dumps({"image": "b.jpg", "query": "the dog", "id": "b"})]
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n")
    assert [(i.id, i.query, i.image_ref) for i in read_items(path)] == [("a", "the cup", "a.jpg"),
                                                                        ("b", "the dog", "b.jpg")]


def test_folder_items_take_every_image_with_one_query(tmp_path):
    for name in ("b.png", "a.jpg", "notes.txt", "C.JPEG"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "sub").mkdir()
    items = read_items(tmp_path, "the cat")
    assert [(i.id, i.query) for i in items] == [("C.JPEG", "the cat"), ("a.jpg", "the cat"), ("b.png", "the cat")]


def test_folder_needs_a_query_and_a_file_refuses_one(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"")
    with pytest.raises(InputError, match="give the query for all of them with --query"):
        read_items(tmp_path)
    with pytest.raises(InputError, match="leave out --query"):
        read_items(jsonl(tmp_path, '{"image": "a.jpg", "query": "x"}'), "the cat")
    with pytest.raises(InputError, match="does not exist"):
        read_items(tmp_path / "nope.jsonl")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="holds no image files"):
        read_items(empty, "x")


def test_folder_names_keep_safe_ids_and_hash_the_rest():
    names = folder_names(["cup", "cat ear/1", "../etc", "A", "a", "x" * 120])
    assert names["cup"] == "cup"
    assert names["cat ear/1"].startswith("cat_ear_1-") and len(names["cat ear/1"]) == len("cat_ear_1-") + 8
    assert names["../etc"].startswith("etc-") and "/" not in names["../etc"]
    assert names["A"] != names["a"] and names["A"].lower() != names["a"].lower()  # case-insensitive file systems
    assert len(names["x" * 120]) == 60 + 9
    assert len(set(names.values())) == 6


def test_a_folder_copied_from_a_mac_or_windows_skips_hidden_files_and_says_how_many(tmp_path, caplog):
    for name in ("a.jpg", "._a.jpg", ".DS_Store", "Thumbs.db", "desktop.ini", ".hidden.png", "b.png"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "__MACOSX").mkdir()
    with caplog.at_level("WARNING", logger="sam3_agent.datasets.batch.hidden_files"):
        items = read_items(tmp_path, "the cat")
    assert [i.id for i in items] == ["a.jpg", "b.png"]
    assert caplog.messages == [f"skipped 6 hidden or system file(s) in {tmp_path} (.DS_Store, ._a.jpg, .hidden.png, "
                               "...): not part of the dataset"]
