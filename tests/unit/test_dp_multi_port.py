"""``--data-parallel-multi-port-external-lb`` (vLLM 0.34's supervised per-port layout): vLLM's
checks in its order and words (``entrypoints/cli/serve.py``, ``launchers/dp_supervisor.py``)."""
from __future__ import annotations

import pytest

from generation.config.cli import load_config
from generation.config.values import ConfigError, error_line

LOCAL = ["-dp", "4", "-dpm", "--data-parallel-size-local", "2"]


@pytest.mark.parametrize("argv,message", [
    (["-dp", "4", "-dpm"], "--data-parallel-multi-port-external-lb requires --data-parallel-size-local >= 2"),
    (["-dp", "1", "-dpm"], "--data-parallel-multi-port-external-lb requires --data-parallel-size > 1"),
    (["-dp", "4", "-dpm", "--data-parallel-size-local", "3"],
     "--data-parallel-size must be divisible by --data-parallel-size-local"),
    (LOCAL + ["--data-parallel-start-rank", "3"], "multi-port supervised ranks would exceed --data-parallel-size"),
    (LOCAL + ["--port", "9255"], "--data-parallel-supervisor-port 9256 overlaps with child rank ports 9255-9256"),
    (LOCAL + ["--grpc-port", "9255"], "--data-parallel-supervisor-port 9256 overlaps with the ranks' gRPC ports "
                                      "9255-9256"),
    (LOCAL + ["-dpe"], "Cannot use more than one data parallel load balancing mode. Choose one of: "
                       "--data-parallel-multi-port-external-lb, --data-parallel-external-lb (or --data-parallel-rank), "
                       "--data-parallel-hybrid-lb (or --data-parallel-start-rank)."),
    (LOCAL + ["--data-parallel-rank", "1"], "Cannot use more than one data parallel load balancing mode."),
    (LOCAL + ["-dph"], "Cannot use more than one data parallel load balancing mode."),
])
def test_vllms_checks(argv, message):
    with pytest.raises(ConfigError) as e:
        load_config(argv, env={})
    assert str(e.value).startswith(message), error_line(e.value)


def test_the_layout_is_one_port_per_local_rank():
    c = load_config(LOCAL + ["--data-parallel-start-rank", "2"], env={})
    assert (c.data_parallel_size, c.data_parallel_size_total, c.data_parallel_external_lb) == (2, 4, True)
    assert c.data_parallel_supervisor_port == 9256
    # a supervised rank's own command line (server.ranks adds these): the per-port layout, no conflict
    rank = load_config(LOCAL + ["--data-parallel-rank", "1", "--data-parallel-external-lb",
                                "--no-data-parallel-multi-port-external-lb"], env={})
    assert rank.data_parallel_rank == 1 and not rank.data_parallel_multi_port_external_lb


@pytest.mark.parametrize("argv,message", [
    (LOCAL + ["--data-parallel-supervisor-port", "70000"], "invalid data parallel supervisor port '70000'"),
    (LOCAL + ["--data-parallel-supervisor-port", "-1"], "invalid data parallel supervisor port '-1'"),
    (["-dp", "2", "-dpe", "--grpc-port", "65535"], "invalid gRPC port '65535': rank 1 would serve gRPC on 65536"),
    (["-dp", "2", "-dpe", "--port", "65535"], "invalid port '65535': rank 1 would listen on 65536"),
])
def test_every_ranks_port_exists(argv, message):
    """A port past 65535 was bind()'s OverflowError (a traceback), or grpcio's wrap to an
    ephemeral port while the log named 65536."""
    with pytest.raises(ConfigError) as e:
        load_config(argv, env={})
    assert str(e.value).startswith(message), error_line(e.value)
