"""argparse types whose errors read as the parser's own, and one-line errors for services
that do not answer."""

from __future__ import annotations

import argparse

import pytest
import requests

from exporter import argtypes


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-reclaimer x")
    parser.add_argument("--memory", type=argtypes.size)
    parser.add_argument("--for", dest="for_", type=argtypes.duration)
    parser.add_argument("--prometheus", type=argtypes.url)
    parser.add_argument("--gpus", type=argtypes.positive_int)
    parser.add_argument("--load", type=argtypes.positive_number)
    return parser


def test_good_values_parse() -> None:
    argv = ["--memory", "4GiB", "--for", "1h30m", "--prometheus", "http://p:9090"]
    args = _parser().parse_args([*argv, "--gpus", "2", "--load", "2.5"])
    assert (args.memory, args.for_, args.prometheus, args.gpus, args.load) == (
        4 * 2**30,
        5400.0,
        "http://p:9090",
        2,
        2.5,
    )


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--memory", "lots"], "argument --memory: "),
        (["--for", "soon"], "argument --for: "),
        (["--prometheus", "prometheus:9090"], "write it with its scheme: http://prometheus:9090"),
        (["--prometheus", "ftp://p"], "not an http(s) URL: 'ftp://p'"),
        (["--gpus", "0"], "must be at least 1: '0'"),
        (["--gpus", "two"], "not a whole number: 'two'"),
        (["--load", "0"], "must be a positive number: '0'"),
        (["--load", "nan"], "must be a positive number: 'nan'"),
        (["--load", "inf"], "must be a positive number: 'inf'"),
        (["--load", "some"], "not a number: 'some'"),
    ],
)
def test_a_bad_value_is_the_parsers_own_error_not_a_traceback(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_a_service_that_does_not_answer_is_one_short_line() -> None:
    from tests.support import free_port

    url = f"http://127.0.0.1:{free_port()}"
    query = url + "/api/v1/query?query=" + "sum(rate(x[5m]))" * 50
    with pytest.raises(requests.ConnectionError) as refused:
        requests.get(query, timeout=2)
    error = argtypes.unreachable("Prometheus", url, refused.value)
    assert isinstance(error, argtypes.CommandError)
    text = str(error)
    assert text.startswith(f"cannot reach Prometheus at {url}: ")
    assert "refused" in text.lower() and "sum(rate" not in text and "\n" not in text
    slow = argtypes.unreachable("Prometheus", url, requests.Timeout("read timed out"))
    assert str(slow) == f"Prometheus at {url} did not answer in time"
