"""Model text is stored losslessly and a damaged run file is a named error (vrr.loop.store: append_records,
read_part, write_jsonl_gz, read_jsonl_gz, read_rejected)."""
import gzip
import json

import pytest
from hypothesis import given, settings, strategies as st

from vrr.loop.store import (RunStoreError, append_records, read_jsonl_gz, read_records, read_rejected,
                            rejected_path, write_jsonl_gz)

# any code point, lone surrogates included, except a high surrogate right before a low one (JSON reads that
# pair as the character it encodes; no decoded text holds one)
TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=40).filter(
    lambda t: not any("\ud800" <= a <= "\udbff" and "\udc00" <= b <= "\udfff" for a, b in zip(t, t[1:])))

ODD = ["\ud800", "\udfff", "a\udc00b", "\x00", "\u2028\u2029", "\U0001f600", "\ufeff", "\\ud800", "\"\n\r\t"]


def _record(i, text):
    return {"index": i, "plan": text, "judge": [text, "ACCEPT" + text], text or "k": [text]}


@pytest.mark.parametrize("text", ODD)
def test_odd_text_is_stored_and_read_back(tmp_path, text):
    part = tmp_path / "t.part.jsonl"
    append_records(part, [_record(0, text), _record(1, "plain")])
    assert read_records(part, repair=False) == [_record(0, text), _record(1, "plain")]
    write_jsonl_gz(tmp_path / "t.jsonl.gz", [_record(0, text)])
    assert read_jsonl_gz(tmp_path / "t.jsonl.gz") == [_record(0, text)]


@given(texts=st.lists(TEXT, min_size=1, max_size=4))
@settings(max_examples=200, deadline=None)
def test_any_text_round_trips_through_part_and_frozen_files(tmp_path_factory, texts):
    folder = tmp_path_factory.mktemp("store")
    records = [_record(i, t) for i, t in enumerate(texts)]
    append_records(folder / "t.part.jsonl", records)
    assert read_records(folder / "t.part.jsonl", repair=False) == records
    write_jsonl_gz(folder / "t.jsonl.gz", records)
    assert read_jsonl_gz(folder / "t.jsonl.gz") == records


def test_plain_text_is_stored_as_before():
    """Text without surrogates keeps its bytes (committed windows stay byte for byte)."""
    from vrr.loop.store._files import record_line

    rec = {"b": "caf\u00e9 \U0001f600", "a": 1}
    assert record_line(rec) == json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n"


GZ_DAMAGE = [
    ("not gzip", b"plain text\n", "not a complete gzip file"),
    ("cut short", gzip.compress(b'{"index": 0}\n' * 100)[:-9], "not a complete gzip file"),
    ("not UTF-8", gzip.compress(b'{"index": 0, "plan": "\xff"}\n'), "line 1: not UTF-8"),
    ("not JSON", gzip.compress(b'{"index": 0}\n{"index": \n'), "line 2: not JSON"),
    ("not an object", gzip.compress(b'[1, 2]\n'), "line 1: not a JSON object"),
    ("deep", gzip.compress(b"[" * 100_000 + b"]" * 100_000 + b"\n"), "line 1: not JSON"),
]


@pytest.mark.parametrize("what, data, message", GZ_DAMAGE, ids=[d[0] for d in GZ_DAMAGE])
def test_a_damaged_frozen_window_is_a_named_error(tmp_path, what, data, message):
    path = tmp_path / "trajectories.jsonl.gz"
    path.write_bytes(data)
    with pytest.raises(RunStoreError, match=message) as err:
        read_jsonl_gz(path)
    assert str(path) in str(err.value)


def test_a_missing_frozen_window_is_a_named_error(tmp_path):
    with pytest.raises(RunStoreError, match="missing"):
        read_jsonl_gz(tmp_path / "probe.jsonl.gz")


REJECTED_DAMAGE = [
    ("not UTF-8", b'{"text": "\xff"}\n', "line 1: not UTF-8"),
    ("not JSON", b'{"text": "a"}\n{"text"\n', "line 2: not JSON"),
    ("not an object", b'"a"\n', "line 1: not a JSON object"),
    ("no text", b'{"source": "x"}\n', "line 1: neither"),
    ("text not a string", b'{"text": 5}\n', "line 1: neither"),
    ("bad base64", b'{"base64": "%%%"}\n', "line 1:"),
    ("base64 not a string", b'{"base64": 5}\n', "line 1: field 'base64'"),
    ("deep", b"[" * 100_000 + b"\n", "line 1: not JSON"),
]


@pytest.mark.parametrize("what, data, message", REJECTED_DAMAGE, ids=[d[0] for d in REJECTED_DAMAGE])
def test_a_damaged_rejected_file_is_a_named_error(tmp_path, what, data, message):
    part = tmp_path / "trajectories.part.jsonl"
    rejected_path(part).write_bytes(data)
    with pytest.raises(RunStoreError, match=message) as err:
        read_rejected(part)
    assert str(rejected_path(part)) in str(err.value)


def test_lines_set_aside_keep_their_exact_bytes(tmp_path):
    part = tmp_path / "trajectories.part.jsonl"
    good = json.dumps({"index": 0}).encode()
    lines = [b"\xff\xfe not utf-8", b'{"index": "x"}', b"[" * 50_000]
    part.write_bytes(b"\n".join([good, *lines]) + b"\n")
    with pytest.warns(UserWarning):
        assert read_records(part) == [{"index": 0}]
    assert [e["raw"] for e in read_rejected(part)] == lines
