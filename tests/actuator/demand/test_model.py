"""Requests (actuator/demand/model.py): nonsense is refused, where a request may run."""

from __future__ import annotations

import pytest

from actuator.demand import Demand, DemandError, Request


def test_nonsense_requests_are_refused():
    with pytest.raises(DemandError):
        Request(source="slurm", key="1", who="job 1", gpus=1000)
    with pytest.raises(DemandError):
        Request(source="wait", key="x", who="x", gpus=0)
    with pytest.raises(DemandError):
        Request(source="slurm", key="1", who="job 1", gpus=-1)


def test_where_a_request_may_run_and_how_it_reads():
    anywhere = Request(source="kubernetes", key="ml/a", who="pod ml/a", gpus=2)
    pool = Request(source="promql:a100", key="0", who="a request", nodes=("gpu-a-*",))
    assert anywhere.may_run_on("n1") and anywhere.ref == "kubernetes:ml/a"
    assert pool.may_run_on("gpu-a-3") and not pool.may_run_on("gpu-b-1")
    assert anywhere.describe() == "pod ml/a (wants 2 GPU(s) on one node)"
    assert Demand().known and not Demand(down={"slurm": "x"}).known
