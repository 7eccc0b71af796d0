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
    with pytest.raises(InputError, match="line 2 repeats the id .* of line 1"):
        read_items(jsonl(tmp_path, line, line))


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
