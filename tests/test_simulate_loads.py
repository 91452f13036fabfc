"""simulate's load specs: built once from the flags, each checked where it is built."""

import pytest

from phasewise.commands._loads import (
    ClosedLoad,
    OpenLoad,
    StreamSpec,
    TraceLoad,
    loads_from_flags,
)
from phasewise.errors import InputError


def test_each_swept_value_of_the_one_load_flag_is_one_load():
    assert loads_from_flags("2,4", None, None, None) == [OpenLoad(2.0), OpenLoad(4.0)]
    assert loads_from_flags(None, "1,8", None, 0.5, 2.0) == [ClosedLoad(1, 0.5, 2.0),
                                                            ClosedLoad(8, 0.5, 2.0)]
    assert loads_from_flags(None, None, "t.csv", None) == [TraceLoad("t.csv")]
    # no load flag: an open loop at 4 requests/s
    assert loads_from_flags(None, None, None, None) == [OpenLoad(4.0)]


def test_two_load_flags_or_a_load_out_of_range_are_refused():
    with pytest.raises(InputError, match="--rate and --clients each set the load"):
        loads_from_flags("4", "8", None, None)
    with pytest.raises(InputError, match="--clients 0"):
        ClosedLoad(0)
    with pytest.raises(InputError, match="--rate"):
        OpenLoad(0.0)


def test_a_stream_checks_its_warmup_and_range_ratio_and_records_its_workload():
    stream = StreamSpec(100, "1024", "uniform:10:20", warmup=10, range_ratio=0.5)
    assert stream.workload() == {"num_requests": 100, "isl": "1024", "osl": "uniform:10:20",
                                 "seed": 0, "prefix_hit_rate": 0.0,
                                 "random_range_ratio": 0.5, "warmup": 10}
    with pytest.raises(InputError, match="--warmup 100"):
        StreamSpec(100, "1024", "256", warmup=100)
    with pytest.raises(InputError, match="--random-range-ratio 0"):
        StreamSpec(100, "1024", "256", range_ratio=0.0)
    with pytest.raises(AttributeError):
        stream.seed = 1  # frozen
