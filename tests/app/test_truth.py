"""The truth the local run and the benchmarks judge the output by: what the pipeline's own
aggregation makes of the acknowledged records, each output record matched to the input records
it covers (their latency), and any output that repeats or goes back found."""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from app.pipelines.distinct_users import DistinctUsers
from app.pipelines.page_view_count import PageViewCount
from app.pipelines.product_revenue import ProductRevenue
from devkit.exactness_report import write_exactness_report
from devkit.truth import OutputRecord, Truth, check_output


def _view(page: str) -> bytes:
    return orjson.dumps({"page": page})


def _out(key: str, value: bytes, at_ms: int, partition: int = 0) -> OutputRecord:
    return OutputRecord(partition, 0, at_ms, key, value)


def test_each_input_record_gets_the_latency_of_the_first_output_that_covered_it() -> None:
    truth = Truth(PageViewCount())
    for created in (1_000, 2_000, 3_000, None):
        truth.add("/a", _view("/a"), created)
    truth.add("/b", _view("/b"), 500)
    truth.observe(_out("/a", b"2", 2_500))  # views 1 and 2
    truth.observe(_out("/b", b"1", 4_000, partition=1))
    truth.observe(_out("/a", b"4", 9_000))  # views 3 and 4 (4 was not timed)
    assert [(lat.partition, lat.output_ms, lat.seconds) for lat in truth.latencies] == [
        (0, 2_500, 1.5),
        (0, 2_500, 0.5),
        (1, 4_000, 3.5),
        (0, 9_000, 6.0),
    ]
    check = check_output(truth, {"/a": b"4", "/b": b"1"})
    assert check.ok, check.describe()
    assert check.produced == 5


def test_an_output_that_goes_back_or_repeats_is_a_duplicate() -> None:
    truth = Truth(PageViewCount())
    for _ in range(3):
        truth.add("/a", _view("/a"), None)
    truth.observe(_out("/a", b"2", 1))
    truth.observe(_out("/a", b"1", 2))  # a restored state counting again
    truth.observe(_out("/a", b"2", 3))
    truth.observe(_out("/a", b"3", 4))  # passes the two before it: they can never match
    assert truth.repeated() == 2
    check = check_output(truth, {"/a": b"3"})
    assert not check.ok and check.duplicates == 2


def test_a_pair_take_over_showing_the_same_value_again_is_republished_not_a_duplicate() -> None:
    truth = Truth(PageViewCount(), republished_ok=True)
    for _ in range(2):
        truth.add("/a", _view("/a"), None)
    truth.observe(_out("/a", b"2", 1))
    truth.observe(_out("/a", b"2", 2))  # the other side's snapshot: the same value again
    truth.observe(_out("/a", b"1", 3))  # but going back is still a duplicate
    truth.add("/a", _view("/a"), None)
    truth.observe(_out("/a", b"3", 4))
    assert truth.republished == 1
    assert truth.repeated() == 1
    strict = Truth(PageViewCount())
    strict.add("/a", _view("/a"), None)
    strict.observe(_out("/a", b"1", 1))
    strict.observe(_out("/a", b"1", 2))
    assert check_output(strict, {"/a": b"1"}).duplicates == 1


def test_an_output_read_before_its_input_is_acknowledged_waits_for_it() -> None:
    truth = Truth(ProductRevenue())
    truth.add("p-1", b'{"amount_cents": 100}', 1_000)
    truth.observe(_out("p-1", b"350", 5_000))  # the delivery report of 250 is late
    assert truth.unmatched() and truth.repeated() == 0
    truth.add("p-1", b'{"amount_cents": 250}', 2_000)
    assert not truth.unmatched()
    assert [lat.seconds for lat in truth.latencies] == [4.0, 3.0]
    assert check_output(truth, {"p-1": b"350"}).ok


def test_a_value_the_state_repeats_matches_its_first_place_ahead() -> None:
    truth = Truth(DistinctUsers())
    for user, created in (("u1", 1_000), ("u1", 2_000), ("u2", 3_000)):
        truth.add("p-1", orjson.dumps({"user": user}), created)
    truth.observe(_out("p-1", b"1", 2_500))  # a batch that ended after the second event
    truth.observe(_out("p-1", b"2", 3_500))
    # The second event is taken as covered by the second output: overstated, never understated.
    assert [lat.seconds for lat in truth.latencies] == [1.5, 1.5, 0.5]
    assert check_output(truth, {"p-1": b"2"}).ok


def test_a_malformed_record_adds_nothing_and_names_its_reason() -> None:
    truth = Truth(PageViewCount())
    assert truth.add("/a", _view("/b"), 1) == "page-mismatch"
    assert truth.add("/a", None, 1) == "null-value"
    assert truth.expected() == {} and truth.records() == {}


def test_the_check_names_missing_and_wrong_keys() -> None:
    truth = Truth(PageViewCount())
    for page in ("/a", "/a", "/b"):
        truth.add(page, _view(page), None)
    check = check_output(truth, {"/a": b"1", "/c": b"7"})
    assert check.missing_keys == ("/b",)
    assert check.wrong_keys == (("/a", "2", "1"), ("/c", "nothing", "7"))
    assert "MISMATCH" in check.describe() and "/a: 2 expected, 1 found" in check.describe()


def test_a_reused_cluster_starts_the_truth_from_the_changelog() -> None:
    truth = Truth(DistinctUsers(), initial={"p-1": b'["u1","u2"]'})
    truth.add("p-1", orjson.dumps({"user": "u2"}), None)
    truth.add("p-1", orjson.dumps({"user": "u3"}), None)
    assert truth.expected() == {"p-1": b"3"}


def test_the_exactness_report_names_each_broken_record_and_its_key_s_whole_output(
    tmp_path: Path,
) -> None:
    truth = Truth(PageViewCount())
    for page in ("/a", "/a", "/b"):
        truth.add(page, _view(page), None)
    outputs = [
        OutputRecord(2, 10, 1, "/a", b"2"),
        OutputRecord(2, 11, 2, "/a", b"1"),  # a state restored without the last batch
        OutputRecord(0, 5, 1, "/b", b"1"),
    ]
    for record in outputs:
        truth.observe(record)
    check = check_output(truth, {"/a": b"1", "/b": b"1"})
    lines = write_exactness_report(tmp_path / "exactness.json", truth, check, outputs)
    report = json.loads((tmp_path / "exactness.json").read_text())
    assert report["broken"] == [
        {"key": "/a", "partition": 2, "offset": 11, "timestamp_ms": 2, "value": "1"}
    ]
    assert report["keys"] == {
        "/a": {
            "expected": "2",
            "output": [
                {"partition": 2, "offset": 10, "timestamp_ms": 1, "value": "2"},
                {"partition": 2, "offset": 11, "timestamp_ms": 2, "value": "1"},
            ],
        }
    }
    assert lines[0].startswith("partition 2: 1 records judged duplicates, offsets 11-11")
    assert lines[-1].startswith("keys wrong at the end: 1;")
